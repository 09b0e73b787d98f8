"""The extractive generator: no model. It copies source lines, deterministically, and labels every output
"extractive" (engine `extractive` in the model pool), so the demo and tests generate without a model.

It answers each member block of a batch prompt (`### member <id>` … `### end`) with one "<Section>: ..." line per
section, the member's facts placed in the section they fit best, within the member's token allowance; a prompt
without member blocks gets its leading lines, within max_tokens.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from streams.models.protocol import Generated, Streaming
from streams.text import tokens

WORD = re.compile(r"[a-z0-9]+")
SECTION_SPEC = re.compile(r"^- ([A-Z][\w ]*?): (.+)$", re.MULTILINE)
MEMBER_BLOCK = re.compile(r"^### member (\S+)(?: \(([^)]*)\))?\n(.*?)(?=^### )", re.MULTILINE | re.DOTALL)
BUDGET = re.compile(r"within (\d+) tokens")
STOP_WORDS = {"the", "and", "of", "to", "a", "in", "for", "on", "with", "their", "its", "this", "that", "or"}
KEY_LINE = re.compile(r"^([\w.\-]+(?: [\w.\-]+){0,3}):(?: (.*))?$")
CLAUSE = re.compile(r"; |, (?=[\w -]+=)|(?<=[a-z0-9%)][.!?]) +(?=[A-Z0-9])")  # items, k=v pairs, sentences
RECORD_CLAUSE = re.compile(r"; |(?<=[a-z0-9%)][.!?]) +(?=[A-Z0-9])")
CUTS = (" | ", "; ", ", ", " ")  # where a too-long fact is cut, coarsest first
NO_FACTS = "none reported"
# Status-report vocabulary in stems (see `stem`): a section whose name and description use words of a group
# also wants the rest of that group, so `blockers`, `concerns` or `escalations` land under a section
# described as "open issues, incidents and their severity" whatever the member calls its fields.
THESAURUS_WORDS = (
    (
        "progress status state milestone done complete completed shipped delivered deliverable highlights achieved "
        "launched live closed result metrics kpi health phase percent pct project workstream program portfolio "
        "summary update reached released renewed passed saved throughput accomplished wins"
    ),
    (
        "risk issues blocker blocked incident severity sev critical concern problem escalation findings failed "
        "failure broken late delayed behind slipping overdue missing outage bug drift rejected disputed threat "
        "watchlist churn breach exhausted stuck paused vulnerability alert warning amber red impact"
    ),
    (
        "next plan planned upcoming todo due deadline eta target owner decision decide asks approve approval "
        "scheduled will goal roadmap action hire order needed request"
    ),
)


def stem(word: str) -> str:
    """Crude English stem, the same for a field name and a description: blockers, blocked → block."""
    for suffix in ("ings", "ing", "ed", "es", "s", "er"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


THESAURUS = tuple(frozenset(stem(w) for w in group.split()) for group in THESAURUS_WORDS)


def words(text: str) -> set[str]:
    """Stems of the lower-case words of `text`, stop words left out (owners ~ owner, blocked ~ blockers)."""
    return {
        stem(w)
        for w in WORD.findall(re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower().replace("_", " "))
        if w not in STOP_WORDS
    }


@dataclass
class Fact:
    """One fact of a member block: the field path it sits under and its text, as the prompt gives them."""

    key: str
    text: str
    order: int

    def render(self) -> str:
        return f"{self.key}: {self.text}" if self.key else self.text


def facts(body: str) -> list[Fact]:
    """The facts of a rendered member block (streams/batch/render.py): `key: value` lines, `key:` headers
    over `- item` lines (an item is one fact); a value holding several clauses ("a; b", "k=v, k=v", sentences)
    gives one fact per clause, but a dotted entry (`incidents.INC-7: what=…, sev=P1`) keeps its pairs together."""
    out: list[Fact] = []
    group = ""
    for raw in body.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("- "):
            pieces, key = [line[2:].strip()], group
        else:
            found = KEY_LINE.match(line)
            if found and found.group(2) is None:
                group = found.group(1)
                continue
            key, value = (found.group(1), found.group(2).strip()) if found else ("", line)
            group = ""
            clauses = RECORD_CLAUSE if "." in key else CLAUSE  # `a.b: k=v, k=v` is one record: keep it whole
            pieces = [p.strip() for p in clauses.split(value)]
        base = len(out)
        out.extend(Fact(key, piece, base + i) for i, piece in enumerate(p for p in pieces if p))
    return out


def section_words(sections: list[tuple[str, str]]) -> list[tuple[set[str], set[str]]]:
    """Per section: (its own words, the thesaurus groups its words call up)."""
    out = []
    for name, description in sections:
        own = words(name + " " + description)
        overlaps = [len(own & group) for group in THESAURUS]
        best = max(overlaps)
        wider = set().union(*(g for g, n in zip(THESAURUS, overlaps) if n and (n >= 2 or n == best)))
        out.append((own, wider - own))
    return out


def relevance(fact: Fact, own: set[str], wider: set[str]) -> float:
    """How well `fact` fits a section: field-name words count double, the section's own words 1.5 times."""
    key, text = words(fact.key), words(fact.text)
    return sum((2 if w in key else 1) * (1.5 if w in own else 1) for w in (key | text) if w in own or w in wider)


class ExtractiveGenerator:
    """Copies each member's facts into the template section each fits, in the requested layout. No model, no
    randomness."""

    name = "extractive"
    model = "extractive"
    label = "extractive"

    def __init__(self, count_model: str = "gpt-4o-mini"):
        self.count_model = count_model

    def generate(self, prompt: str, max_tokens: int) -> Generated:
        started = time.perf_counter()
        sections = SECTION_SPEC.findall(prompt.split("### member", 1)[0])
        blocks = MEMBER_BLOCK.findall(prompt)
        if blocks and sections:
            text = "\n".join(
                self.answer(member, header, body, sections, max_tokens, len(blocks) > 1)
                for member, header, body in blocks
            )
        else:
            text = self.fit(" ".join(line.strip() for line in prompt.splitlines() if line.strip()), max_tokens)
        text = tokens.truncate(text, max_tokens, self.count_model)
        return Generated(
            text,
            tokens.count(prompt, self.count_model),
            tokens.count(text, self.count_model),
            self.model,
            self.label,
            (time.perf_counter() - started) * 1000,
        )

    def stream(self, prompt: str, max_tokens: int, piece_words: int = 8) -> Streaming:
        """The extractive answer in pieces of `piece_words` words (it exists at once: no model)."""
        out = self.generate(prompt, max_tokens)
        words_and_spaces = re.findall(r"\S+\s*|\s+", out.text)
        pieces = ("".join(words_and_spaces[i : i + piece_words]) for i in range(0, len(words_and_spaces), piece_words))
        return Streaming(pieces, out.input_tokens, self.model, self.label, output_tokens=out.output_tokens)

    def answer(
        self,
        member: str,
        header: str,
        body: str,
        sections: list[tuple[str, str]],
        max_tokens: int,
        several: bool = True,
    ) -> str:
        """One member's answer: each fact of its block goes to the section it fits best (field names weigh
        most); facts that fit none go to the first section. A section no fact fits says so. Whole facts are
        kept while they fit the member's budget; the first of a section is cut at a word when it alone is
        too long."""
        found = BUDGET.search(header or "")
        budget = min(int(found.group(1)), max_tokens) if found else max_tokens
        head = [f"=== {member} ==="] if several else []
        held = facts(body)
        wanted = section_words(sections)
        scores = [[relevance(f, own, wider) for own, wider in wanted] for f in held]
        picks: list[list[Fact]] = [[] for _ in sections]
        for fact, row in zip(held, scores):
            best = max(range(len(sections)), key=lambda s: (row[s], -s))
            if row[best] > 0:
                picks[best].append(fact)
        for s, chosen in enumerate(picks):
            chosen.sort(key=lambda f: (-scores[f.order][s], f.order))
            if not chosen:
                fallback = max(held, key=lambda f: (scores[f.order][s], -f.order), default=None)
                if fallback is not None and scores[fallback.order][s] > 0:
                    chosen.append(fallback)
        picks[0].extend(f for f, row in zip(held, scores) if max(row) <= 0)
        names = [f"{name}: " for name, _ in sections]
        fixed = tokens.count("\n".join(names), self.count_model) + 1

        def size(texts: list[str]) -> int:  # the section lines: the member line is the call's overhead
            return tokens.count(
                "\n".join(name + (text or NO_FACTS) for name, text in zip(names, texts)), self.count_model
            )

        texts = self.fill(picks, budget - fixed)
        while size(texts) > budget and any(len(p) > 1 for p in picks):
            fullest = max(range(len(picks)), key=lambda s: len(picks[s]))
            picks[fullest].pop()
            texts = self.fill(picks, budget - fixed)
        texts = [text or NO_FACTS for text in texts]
        while (excess := size(texts) - budget) > 0:
            longest = max(range(len(texts)), key=lambda s: tokens.count(texts[s], self.count_model))
            length = tokens.count(texts[longest], self.count_model)
            if length <= 1:
                break  # not even one token a section fits: the splitter reports the answer over budget
            shorter = self.cut(texts[longest], max(1, length - excess))
            if not shorter or tokens.count(shorter, self.count_model) >= length:
                shorter = tokens.truncate(texts[longest], length - 1, self.count_model)
            texts[longest] = shorter
        return "\n".join(head + [name + text for name, text in zip(names, texts)])

    def fill(self, picks: list[list[Fact]], room: int) -> list[str]:
        """Per section, its facts that fit `room` tokens in all (in source order, "; "-joined): first each
        section's best fact (cut to an even share if longer), then further facts round-robin while they fit."""

        def size(fact: Fact) -> int:
            return tokens.count(fact.render(), self.count_model) + 1  # +1: the "; " joint

        share = max(4, (room - len(picks) * tokens.count(NO_FACTS, self.count_model)) // max(1, len(picks)))
        kept: list[list[tuple[Fact, str]]] = []
        left = room
        for chosen in picks:
            if not chosen:
                kept.append([])
                left -= tokens.count(NO_FACTS, self.count_model)
                continue
            first = chosen[0].render()
            if size(chosen[0]) > share:
                first = self.cut(first, share - 1)
            kept.append([(chosen[0], first)])
            left -= tokens.count(first, self.count_model) + 1
        added = True
        depth = 1
        while added:
            added = False
            for s, chosen in enumerate(picks):
                if depth < len(chosen) and size(chosen[depth]) <= left:
                    kept[s].append((chosen[depth], chosen[depth].render()))
                    left -= size(chosen[depth])
                    added = True
            depth += 1
        return [self.join(sorted(pairs, key=lambda p: p[0].order)) for pairs in kept]

    @staticmethod
    def join(pairs: list[tuple[Fact, str]]) -> str:
        """Facts in source order, "; "-joined; a fact under the same field as the one before drops the field name."""
        out, last = "", None
        for fact, text in pairs:
            text = text[len(fact.key) + 2 :] if fact.key and fact.key == last else text
            out += text if not out else (" " if out.endswith((".", "!", "?")) else "; ") + text
            last = fact.key
        return out

    def cut(self, text: str, max_tokens: int) -> str:
        """`text` cut to `max_tokens` tokens at the last field, clause or word boundary that keeps at least
        half of what fits, so a cut never splits a name or a number."""
        fits = tokens.truncate(text, max(1, max_tokens), self.count_model)
        if len(fits) == len(text):
            return text
        for joint in CUTS:
            at = fits.rfind(joint)
            if at >= len(fits) // 2:
                return fits[:at].rstrip(" ;,|=:")
        return fits.rstrip(" ;,|=:")

    def fit(self, text: str, max_tokens: int) -> str:
        return tokens.truncate(text, max(1, max_tokens), self.count_model).strip()


def generator(spec) -> ExtractiveGenerator:
    """The pool's factory: Jev counts in the spec's tokenizer (the default model's when it names none)."""
    return ExtractiveGenerator(spec.tokenizer or "gpt-4o-mini")
