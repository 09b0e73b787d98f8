"""Cleanup of generated text: drop what callers pay for but never need, never the content.

Removed only: a leading preamble ("Sure! Here is …:", "好的，以下是…："), trailing closers ("I hope this helps!",
"希望对您有帮助"), leaked debug markers, runs of blank lines, and a fence wrapping the whole answer. Code inside
fences is never touched, and a sentence that carries a number or a name keeps it. Patterns: patterns.yaml.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field

import tiktoken

from streams.output import truncate as truncation
from streams.output.patterns import Patterns, resolve
from streams.text import language, tokens

FENCE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)\n(?P<body>.*?)"
    r"(?:\n[ \t]*(?P=fence)[`~]*[ \t]*(?=\n|\Z)|\Z)",
    re.MULTILINE | re.DOTALL,
)
BLANK_RUN = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
LEADING_BLANK = re.compile(r"\A(?:[ \t]*\n)+")
CLOSER_WINDOW = 600  # characters from the end in which closing sentences are looked for
LOWER_WORD = re.compile(r"[a-z]+\b")
OPENING_END = re.compile(r"\n(?=\S)")  # a line break before a non-space: no token spans it
OPENING_WINDOW = 400  # characters of a cleaned answer in which its rewritten opening line must end
OPENING_VIEW = 1000  # characters at the start of an answer read in simplified form: more than any opening spans
# A number, or a word starting upper case: a name (Python, SystemVerilog, GCD, HTML5) unless it merely opens
# a sentence (Sure, Here, Let); "I" and its contractions are no names.
CONTENT_TOKEN = re.compile(r"\d+(?:[.,:/]\d+)*|[A-Za-z][A-Za-z0-9'’_-]*")
SENTENCE_OPENING = re.compile(r"(?:\A|[.!?:。！？：]\s+|\n[ \t>#*+\-\d.)]*|[(\"'“‘*_`]+)\Z")
NOT_NAMES = frozenset(
    {"I", "I'm", "I'd", "I'll", "I've", "I’m", "I’d", "I’ll", "I’ve", "OK", "AI"}
)  # how assistants name themselves in filler: "As an AI", "作为一个AI助手"
MAX_INTERJECTIONS = 4  # filler openings removed one after another ("好的！作为一个AI助手，很高兴为您解答。")
CLAUSE = re.compile(r"[^，,；;]+[，,；;]?")  # a clause of a sentence, with the comma that ends it
WORDS = re.compile(r"[^\W_]")  # a letter or digit (any script): a "sentence" without one is no sentence


def content_tokens(text: str, openers: bool = False) -> Counter:
    """The numbers and names in `text`, with their counts: what cleanup must never take out of an answer.
    `openers`: count sentence-opening capitalised words too (a name can open a sentence once a filler
    before it went)."""
    found: Counter = Counter()
    for m in CONTENT_TOKEN.finditer(text):
        word = m.group(0)
        if word[0].isdigit() or _is_name(word, text, m.start(), openers):
            found[word] += 1
    found.update(language.chinese_numbers(text))
    return found


def _is_name(word: str, text: str, at: int, openers: bool) -> bool:
    """A capitalised word counts as a name unless it only opens a sentence (mixed case or digits always do)."""
    return (
        word[0].isupper()
        and word not in NOT_NAMES
        and (
            openers
            or word[1:] != word[1:].lower()
            or any(c.isdigit() for c in word)
            or not SENTENCE_OPENING.search(text, max(0, at - 12), at)
        )
    )


def dropped_content(original: str, cleaned: str) -> Counter:
    """Numbers and names of `original` that `cleaned` no longer holds (empty: nothing of substance lost)."""
    return content_tokens(original) - content_tokens(cleaned, openers=True)


@dataclass
class Cleaned:
    text: str
    tokens_before: int
    tokens_after: int
    removed: list[str] = field(default_factory=list)  # kinds: preamble, closer, debug, blank_lines, fence
    flagged: list[str] = field(default_factory=list)  # sensitive words found in what the caller would get
    code_blocks: list[str] = field(default_factory=list)
    truncated: bool = False
    short: bool = False  # below min_tokens
    version: str = ""  # patterns version used, kept with cached answers

    @property
    def tokens_removed(self) -> int:
        return self.tokens_before - self.tokens_after


@functools.lru_cache(maxsize=64)
def _closing(fence: str) -> re.Pattern:
    """FENCE's closing line for a block opened by `fence`."""
    return re.compile(r"\n[ \t]*" + re.escape(fence) + r"[`~]*[ \t]*(?=\n|\Z)")


def _next_line_after(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def _opening(text: str, pos: int) -> tuple[int, str, int] | None:
    """(line start, fence, body start) of the first line from `pos` on that opens a FENCE block: found by
    str.find on the fence strings, not by trying a regex at every character."""
    tick, tilde = text.find("```", pos), text.find("~~~", pos)
    while tick >= 0 or tilde >= 0:
        at = tick if tilde < 0 or 0 <= tick < tilde else tilde
        start = text.rfind("\n", 0, at) + 1
        if start >= pos and not text[start:at].strip(" \t"):
            line_end = text.find("\n", at)
            if line_end < 0:
                return None  # an opening line needs a line after it
            run = at + 3
            while text[run] == text[at]:
                run += 1
            return start, text[at:run], line_end + 1
        if at == tick:
            tick = text.find("```", _next_line_after(text, at))
        else:
            tilde = text.find("~~~", _next_line_after(text, at))
    return None


def _segments(text: str) -> list[tuple[bool, str, str]]:
    """(is_code, text, code body) pieces in order, prose between fenced blocks: the blocks FENCE.finditer
    finds, found by looking only at fence lines."""
    if "```" not in text and "~~~" not in text:
        return [(False, text, "")]
    out, pos = [], 0
    while (opening := _opening(text, pos)) is not None:
        start, fence, body_start = opening
        close = _closing(fence).search(text, body_start)
        end, body_end = (close.end(), close.start()) if close else (len(text), len(text))
        out.append((False, text[pos:start], ""))
        out.append((True, text[start:end], text[body_start:body_end]))
        pos = end
    out.append((False, text[pos:], ""))
    return out


def _filler_opening(text: str, p: Patterns, followed: bool) -> re.Match | None:
    """A filler opening at the start of `text`: an interjection, or a greeting when more than its own sentence
    follows it (or code does). An answer that is one greeting sentence is content: "你好，今天过得怎么样？"
    translates "Hello, how are you today?"."""
    if m := p.interjection.match(text):
        return m
    m = p.greeting.match(text)
    return m if m and (followed or _last_sentence_start(text[m.end() :].rstrip(), 0)) else None


def _strip_preamble(prose: str, p: Patterns, followed: bool) -> str:
    """Drop a leading interjection, then a "Here is …:" line if anything follows it (`followed`: code does).
    A preamble that carries content (a number, a name) loses only its filler words: "Sure! Here is a
    Python function that …:" → "A Python function that …:". Patterns match the simplified form of Chinese
    (language.simplified: the same positions), so traditional text loses the same fillers."""
    view = language.simplified(prose[:OPENING_VIEW]) + prose[OPENING_VIEW:]
    m = p.restated_request.match(view)
    if m and content_tokens(prose[: m.end()]):
        m = None  # "Sure, I'd be happy to help you build a CLI in Rust.": only "Sure, " goes
    m = m or _filler_opening(view, p, followed)
    at = m.end() if m else 0
    for _ in range(MAX_INTERJECTIONS - 1):
        more = _filler_opening(view[at:], p, followed) if m else None
        if not more or not more.group().strip():
            break
        at += more.end()
    rest = prose[at:]
    lead = p.lead_in.match(view, at)
    capitalise = bool(m)
    if lead and (followed or rest[lead.end() - at :].strip()):
        if not content_tokens(prose[at : lead.end()]):
            rest = prose[lead.end() :]
        elif filler := p.filler.match(view, at):
            rest, capitalise = prose[filler.end() :], True
    if rest != prose:
        rest = LEADING_BLANK.sub("", rest.lstrip(" \t"))
    if capitalise and (word := LOWER_WORD.match(rest)):
        rest = word.group(0).capitalize() + rest[word.end() :]
    return rest


def _last_sentence_start(body: str, floor: int) -> int | None:
    """Where the last sentence of `body` starts, at or after `floor`: after the last line break (and its
    blanks), `.`, `!` or `?` followed by blanks (after them), or `。！？`, that leaves text after it; 0 when
    `floor` is 0 and there is none, else None. Found by looking back from the end for each kind of break,
    not by walking every sentence of the window."""
    end, best = len(body), (0 if floor == 0 else None)
    line = body.rfind("\n", floor, end)
    if line >= 0:
        after = line + 1
        while after < end and body[after] in " \t":
            after += 1
        best = after if after < end else best
    for mark in ".!?":
        at = body.rfind(mark, max(0, floor - 1), end - 1)
        while at >= 0 and body[at + 1] not in " \t":
            at = body.rfind(mark, max(0, floor - 1), at)
        if at >= 0:
            after = at + 1
            while after < end and body[after] in " \t":
                after += 1
            if after < end and (best is None or after > best):
                best = after
    for mark in "。！？":
        at = body.rfind(mark, max(0, floor - 1), end - 1)
        if at >= 0 and (best is None or at + 1 > best):
            best = at + 1
    return best


def closer_rest(sentence: str, p: Patterns) -> str | None:
    """What stays of a closing sentence: "" when it is a closer, the sentence less its filler clauses when it is
    a CJK sentence that mixes them with content, None when it is no closer. A clause or sentence that carries a
    number or a name is content. Chinese is matched in its simplified form (traditional closers go too)."""
    stripped = sentence.strip()
    if p.closer.fullmatch(language.simplified(stripped)):
        return None if content_tokens(stripped) else ""
    if not language.has_cjk(stripped) or not language.is_cjk(language.detect(stripped)):
        return None
    end = stripped[-1] if stripped[-1] in "。！？!?.~" else ""
    clauses = CLAUSE.findall(stripped.removesuffix(end) if end else stripped)
    kept = [
        c
        for c in clauses
        if not (p.closer.fullmatch(language.simplified(c.rstrip("，,；;")) + (end or "。")) and not content_tokens(c))
    ]
    if len(kept) == len(clauses):
        return None
    return "".join(kept).rstrip("，,；;") + end if kept else ""


def _strip_closers(prose: str, p: Patterns) -> str:
    body = prose.rstrip()
    while body:
        start = _last_sentence_start(body, max(0, len(body) - CLOSER_WINDOW))
        if start and not WORDS.search(body, start):  # a trailing emoji ("希望对您有帮助！😊") ends the one before
            start = _last_sentence_start(body[:start], max(0, len(body) - CLOSER_WINDOW))
        rest = None if start is None else closer_rest(body[start:], p)
        if rest is None:
            break  # not a closer, or one that names something ("… with your Django app"): kept
        body = (body[:start] + rest).rstrip()
        if rest:
            break  # a closing sentence that also carries content: its content ends the answer
    return body if body != prose.rstrip() else prose


def _note(removed: list[str], kind: str, before: str, after: str) -> str:
    """`after`, noting `kind` as removed when it differs from `before`."""
    if after != before and kind not in removed:
        removed.append(kind)
    return after


def _unwrap(text: str, p: Patterns) -> str | None:
    """The body of a fence that wraps the whole answer, when its language is a prose one (```markdown)."""
    stripped = text.strip()
    m = FENCE.fullmatch(stripped)
    if m and m.group("info").strip().lower() in p.unwrap_languages:
        return m.group("body")
    return None


def _clean_body(text: str, p: Patterns, removed: list[str], code_blocks: list[str]) -> str:
    if (inner := _unwrap(text, p)) is not None:
        text = _note(removed, "fence", text, inner)
    parts = _segments(text)
    pieces = []
    for i, (is_code, piece, body) in enumerate(parts):
        if is_code:
            code_blocks.append(body)
            if p.fences == "extract":
                piece = _note(removed, "fence", piece, f"[code {len(code_blocks)}]")
            pieces.append(piece)
            continue
        piece = _note(removed, "debug", piece, p.debug_line.sub("", p.debug_block.sub("", piece)))
        if i == 0:
            piece = _note(removed, "preamble", piece, _strip_preamble(piece, p, followed=len(parts) > 1))
        if i == len(parts) - 1:
            piece = _note(removed, "closer", piece, _strip_closers(piece, p))
        pieces.append(_note(removed, "blank_lines", piece, BLANK_RUN.sub("\n\n", piece)))
    out = "".join(pieces)
    return _note(removed, "blank_lines", out, LEADING_BLANK.sub("", out).rstrip())


def _kept_ids(enc, ids: list[int], text: str, out: str) -> list[int]:
    """Tokens of `out`, derived from `ids` (the tokens of `text`) where `out` is `text` less a head and a
    tail, its opening line perhaps rewritten (a filler dropped, a letter capitalised); else encoded anew.

    The middle `text[start:end]` that `out` keeps verbatim takes its tokens from `ids`, once the tokens of
    head and tail are checked to be exactly the ends of `ids` (tiktoken's pretokenizer is left to right
    without lookbehind, so the middle then gets the same tokens). A rewritten opening is encoded on its
    own, up to a line break followed by a non-space: tiktoken never joins a token across that point."""
    if not out or not isinstance(enc, tiktoken.Encoding):
        return enc.encode_ordinary(out) if out else []
    opening, start = "", text.find(out)
    if start < 0:
        cut = OPENING_END.search(out, 0, OPENING_WINDOW)
        if cut is None or (start := text.find(out[cut.end() :])) < 0:
            return enc.encode_ordinary(out)
        opening, out = out[: cut.end()], out[cut.end() :]
    head, tail = text[:start], text[start + len(out) :]
    head_ids = enc.encode_ordinary(head) if head else []
    tail_ids = enc.encode_ordinary(tail) if tail else []
    if (
        len(head_ids) + len(tail_ids) <= len(ids)
        and ids[: len(head_ids)] == head_ids
        and ids[len(ids) - len(tail_ids) :] == tail_ids
    ):
        return enc.encode_ordinary(opening) + ids[len(head_ids) : len(ids) - len(tail_ids)]
    return enc.encode_ordinary(opening + out)


def clean(
    text: str, *, model: str, max_tokens: int | None = None, min_tokens: int = 0, config: Patterns | str | None = None
) -> Cleaned:
    """Clean `text`, cut it to `max_tokens` tokens of `model`'s encoding, and scan it for sensitive words.
    The text is encoded once; the counts and the cut of what cleanup kept are derived from that encoding.

    `config`: a Patterns object, a patterns file path, or None for the bundled patterns.yaml.
    """
    p = resolve(config)
    enc = tokens.for_model(model)
    ids = enc.encode_ordinary(text)
    tokens_before = len(ids)
    removed: list[str] = []
    code_blocks: list[str] = []
    out = _clean_body(text, p, removed, code_blocks)
    if not out.strip() and text.strip():
        out, removed = text.strip(), []  # never clean an answer away entirely
    kept = ids if out == text else _kept_ids(enc, ids, text, out)
    tokens_after, truncated = len(kept), False
    if max_tokens is not None and tokens_after > max_tokens:
        out, truncated, tokens_after = truncation.cut(out, kept, max_tokens, enc, p.truncation_marker)
    scanned = out if p.fences == "keep" else "\n".join([out, *code_blocks])
    return Cleaned(
        text=out,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        removed=removed,
        flagged=p.scanner.scan(scanned),
        code_blocks=code_blocks,
        truncated=truncated,
        short=tokens_after < min_tokens,
        version=p.version,
    )
