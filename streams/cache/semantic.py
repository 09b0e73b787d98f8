"""L2 semantic cache: the nearest cached question in the same partition, served only if verified.

A partition is the tuple of context constraints (tenant, decision type, segment, language, format), each with its
own index, so a hit never crosses them. A neighbour must pass the cosine floor and the verification checks
(guards.py); with pooled evidence (evidence.py) the learned verifier scores it and it is served only where the
certified threshold allows (a decide partition's in the decide pool, where how decisively the cached decision was
made is a feature too). `probe` returns a refused candidate too, so the miss's answer can be learned from, and
marks near-misses for promotion (Krites): judged the same by the naive twin, the question becomes an alias key of
the cached answer. At most `max_entries`, least recently used evicted first.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from schemas.records import Request
from streams.cache.embedders import Embedder
from streams.cache.entry import Entry, Hit, RefreshQueue, VersionBook, serve
from streams.cache.evidence import PooledEvidence
from streams.cache.exact import normalize
from streams.cache.guards import verify as verify_pair
from streams.cache.index import VectorIndex
from streams.cache.learning import ThresholdLearner
from streams.cache.modelcheck import ModelCheck
from streams.cache.verifier import decisiveness, lead_of
from streams.cache.verifier import features as verifier_features

SCRIPTS = [
    ("zh", re.compile(r"[\u4e00-\u9fff]")),
    ("ja", re.compile(r"[\u3040-\u30ff]")),
    ("ko", re.compile(r"[\uac00-\ud7af]")),
    ("cyrillic", re.compile(r"[\u0400-\u04ff]")),
    ("arabic", re.compile(r"[\u0600-\u06ff]")),
]


def language_of(text: str) -> str:
    """The script family of a question (kana before han: Japanese text mixes both)."""
    found = [name for name, pattern in SCRIPTS if pattern.search(text)]
    return "ja" if "ja" in found else (found[0] if found else "latin")


QUESTION_FIELDS = ("question", "text", "query")


def asks_in_words(request: Request) -> bool:
    """A question in words (a text state, or a question/text/query field): what an embedder can match.
    Structured states are matched exactly (L1) only."""
    state = request.state
    return isinstance(state, str) or (
        isinstance(state, dict) and any(isinstance(state.get(f), str) for f in QUESTION_FIELDS)
    )


def question_of(request: Request) -> str:
    """The text L2 matches on: the state when it is text, else its question/text field, else the state as JSON."""
    state = request.state
    if isinstance(state, str):
        return state
    if isinstance(state, dict):
        for field_name in QUESTION_FIELDS:
            if isinstance(state.get(field_name), str):
                return state[field_name]
    return orjson.dumps(state, option=orjson.OPT_SORT_KEYS).decode()


def partition_of(request: Request) -> tuple:
    """(tenant, decision type, user segment, language, output format): what a hit may never cross.

    For a decide request the output format includes the candidate set, since a cached choice only
    answers a question asked over the same candidates.
    """
    state = request.state if isinstance(request.state, dict) else {}
    segment = str(state.get("user_segment") or state.get("segment") or "")
    output = f"{request.kind}:{request.contracts.max_output_tokens}"
    if request.question_type:  # a declared question type sets a streamed answer's length
        output += f":{request.question_type}"
    if request.candidates:
        ids = orjson.dumps(sorted(c.id for c in request.candidates))
        output += ":" + hashlib.blake2b(ids, digest_size=8).hexdigest()
    return (request.tenant, request.decision_type, segment, language_of(question_of(request)), output)


def partition_kind(partition: tuple) -> str:
    """decide or generate: the request kind a partition's output format starts with."""
    return str(partition[-1]).split(":", 1)[0] if partition else ""


def _same_question(text: str) -> str:
    return normalize(text).lower()


def answers_agree(cached: Mapping, fresh: Mapping) -> bool:
    """Would the cached decision have done for the fresh one? The same action for a choice; for a text
    answer, the same words up to case, spacing and punctuation (a generated answer that differs more counts
    as a disagreement: conservative, it only makes the learned threshold stricter)."""
    if cached.get("action_id") or fresh.get("action_id"):
        return cached.get("action_id") == fresh.get("action_id")
    words = [re.findall(r"\w+", str(d.get("text") or "").lower()) for d in (cached, fresh)]
    return bool(words[0]) and words[0] == words[1]


def _answer_of(part: _Partition, id_: int) -> str:
    """Which answer an index row serves: a decision's chosen action, or a text answer's words (answers_agree's
    rule), else its question's (for a promoted key its target's). Neighbours serving one answer are not rivals
    that make a neighbourhood ambiguous; neighbours close by that answer otherwise are."""
    entry = part.entry(id_)
    value = entry.value
    if isinstance(value, Mapping) and value.get("action_id"):
        return f"action:{value['action_id']}"
    if isinstance(value, Mapping) and value.get("text"):
        return "text:" + " ".join(re.findall(r"\w+", str(value["text"]).lower()))
    return "question:" + _same_question(entry.alias_of or part.texts[id_])


def entry_key(partition: tuple, text: str) -> str:
    data = orjson.dumps([list(partition), _same_question(text)])
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True)
class Candidate:
    """The verified nearest neighbour of a question: what a verdict is learned against. `score` is the
    verifier's probability where a verifier scores candidates (with its feature row and the `cosine`), else the
    cosine."""

    partition: tuple
    question: str  # the cached question it matched
    score: float
    served: bool
    cosine: float | None = None
    features: tuple[float, ...] = ()
    near_miss: bool = False  # refused just under the serving threshold: to be judged for promotion
    asked: str = ""  # the question that met it (with `features`): its verdict's fold is drawn from it

    def to_dict(self) -> dict:
        extra = {"cosine": self.cosine, "features": list(self.features), "asked": self.asked} if self.features else {}
        if self.near_miss:
            extra["near_miss"] = True
        return {
            "partition": list(self.partition),
            "question": self.question,
            "score": self.score,
            "served": self.served,
            **extra,
        }

    @classmethod
    def from_dict(cls, data) -> Candidate:
        return cls(
            tuple(data["partition"]),
            data["question"],
            float(data["score"]),
            bool(data["served"]),
            data.get("cosine"),
            tuple(data.get("features") or ()),
            bool(data.get("near_miss")),
            data.get("asked", ""),
        )


@dataclass
class _Partition:
    index: VectorIndex
    texts: dict[int, str] = field(default_factory=dict)  # index id -> cached question
    entries: dict[int, bytes] = field(default_factory=dict)  # index id -> answer, as Entry.dumps() (no GC work)
    ids: dict[str, int] = field(default_factory=dict)  # _same_question(text) -> index id

    def entry(self, id_: int) -> Entry:
        return Entry.loads(self.entries[id_])

    def keep(self, id_: int, entry: Entry) -> None:
        self.entries[id_] = entry.dumps()


class SemanticCache:
    def __init__(
        self,
        embedder: Embedder,
        threshold: float,
        verify: bool = True,
        max_exact: int = 10_000,
        k: int = 5,
        book: VersionBook | None = None,
        refresh: RefreshQueue | None = None,
        max_entries: int = 100_000,
        check: ModelCheck | None = None,
        learner: ThresholdLearner | None = None,
        evidence: PooledEvidence | None = None,
        promote_margin: float = 0.0,
        decide_evidence: PooledEvidence | None = None,
    ):
        """At most `max_entries` over all partitions: the least recently hit or filled entry is evicted first.
        Without a learner every verified neighbour above `threshold` is served (a fixed threshold). With pooled
        `evidence` (evidence.py) its verifier scores the best verified neighbour (the model check's cosine is
        one of its features instead of a gate) and its learner decides; `promote_margin` (with evidence) marks
        the refused candidates within that margin below the serving threshold as near-misses (0: none);
        `decide_evidence` (with evidence) certifies decide partitions apart, judged by decisions."""
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        if not 0 <= promote_margin < 1:
            raise ValueError(
                f"promote margin must be in [0, 1), got {promote_margin}: set "
                f"JEV_CACHE_PROMOTE_MARGIN (0 turns promotion off)"
            )
        self.promote_margin = promote_margin
        self.promotions = 0  # near-misses promoted to keys of the answer they were judged to share
        self.demotions = 0  # promoted keys removed after a disagreeing verdict on their very question
        self.embedder = embedder
        self.threshold = threshold
        self.verify = verify
        self.check = check
        self.evidence = evidence
        self.decide_evidence = decide_evidence if evidence is not None else None
        self.learner = evidence.learner if evidence is not None else learner
        self.min_cosine = 0.0  # with evidence: the tune control's floor on served cosines
        self.max_exact = max_exact
        self.k = k
        self.max_entries = max_entries
        self.book = VersionBook() if book is None else book
        self.refresh = RefreshQueue() if refresh is None else refresh
        self.partitions: dict[tuple, _Partition] = {}
        self.recency: OrderedDict[tuple[tuple, int], None] = OrderedDict()  # (partition, id), oldest first
        self.evictions = 0
        self.refusals: Counter[str] = Counter()  # why near neighbours above the threshold were not served

    @property
    def min_similarity(self) -> float:
        """The lowest score a hit is served at in any partition, what the tune control
        `cache.l2.min_similarity` sets: the fixed threshold, or with a learner the higher of the exploration
        floor (`threshold`) and the learner's floor (each partition's learned threshold may be higher still)."""
        if self.evidence is not None:
            return max(self.threshold, self.min_cosine)
        return self.threshold if self.learner is None else max(self.threshold, self.learner.floor)

    @min_similarity.setter
    def min_similarity(self, value: float) -> None:
        """With a learner, its floor (candidates below it keep being compared and learned from; with pooled
        evidence the floor is on the cosine, the learner's scale being the verifier's probability); without,
        the fixed threshold itself."""
        if self.evidence is not None:
            self.min_cosine = value
        elif self.learner is not None:
            self.learner.floor = value
        else:
            self.threshold = value

    def evidence_for(self, partition: tuple) -> PooledEvidence | None:
        """The pool that certifies `partition`'s hits: the decide pool for a decide partition where there is one."""
        if self.decide_evidence is not None and partition_kind(partition) == "decide":
            return self.decide_evidence
        return self.evidence

    def embed(self, text: str) -> np.ndarray:
        return self.embedder.embed([text])[0]

    def lookup(self, partition: tuple, text: str, vector: np.ndarray | None = None) -> Hit | None:
        return self.probe(partition, text, vector)[0]

    def probe(
        self, partition: tuple, text: str, vector: np.ndarray | None = None
    ) -> tuple[Hit | None, Candidate | None]:
        """(the hit served, or None; the verified candidate, served or refused by the learner, or None)."""
        part = self.partitions.get(partition)
        if part is None:
            return None, None
        same = part.ids.get(_same_question(text))
        held = part.entry(same) if same is not None else None
        if same is not None and held is not None and (held.predictive or held.alias_of):
            return self._serve(partition, part, same, 1.0)  # asked by its very question: no semantic guess
        vector = self.embed(text) if vector is None else vector
        found = part.index.search(vector, self.k)
        for rank, (id_, score) in enumerate(found):
            if score < self.threshold:
                break
            cached = part.texts[id_]
            if self.verify:
                verdict = verify_pair(text, cached)
                if not verdict.ok:
                    self.refusals[verdict.reason] += 1
                    continue
            if self.evidence is not None:
                answer = _answer_of(part, id_)
                rival = next((s for other, s in found[rank + 1 :] if _answer_of(part, other) != answer), 0.0)
                return self._judge(partition, part, id_, text, score, rival)
            if self.check is not None and not self.check.agrees(text, cached):
                self.refusals["model"] += 1
                continue
            if self.learner is not None and not self.learner.allows(partition, _same_question(cached), score):
                self.refusals["learned_threshold"] += 1
                return None, Candidate(partition, cached, score, served=False)
            return self._serve(partition, part, id_, score)
        return None, None

    def _serve(self, partition: tuple, part: _Partition, id_: int, score: float) -> tuple[Hit | None, Candidate]:
        cached = part.texts[id_]
        self.recency.move_to_end((partition, id_))
        hit = self._hit(partition, part, id_, entry_key(partition, cached), score)
        return hit, Candidate(partition, cached, score, served=hit is not None)

    def _hit(self, partition: tuple, part: _Partition, id_: int, key: str, score: float) -> Hit | None:
        """serve() on the entry at id_; one served stale is kept so (it is served stale once)."""
        cached = part.texts[id_]
        hit = serve(
            key, part.entry(id_), self.book, self.refresh, payload=(partition, cached), score=score, matched=cached
        )
        if hit is not None and hit.stale:
            part.keep(id_, hit.entry)
        return hit

    def _judge(
        self, partition: tuple, part: _Partition, id_: int, text: str, cosine: float, next_cosine: float
    ) -> tuple[Hit | None, Candidate]:
        """The best verified neighbour, scored by the verifier and served where the pooled evidence allows."""
        cached = part.texts[id_]
        evidence = self.evidence_for(partition)
        assert evidence is not None, "a verifier scores candidates only where pooled evidence certifies hits"
        second = self.check.score(text, cached) if self.check is not None else None
        decide = partition_kind(partition) == "decide"
        value = part.entry(id_).value if decide else None  # a text answer's lead is not a decision's
        row = verifier_features(
            text, cached, float(cosine), float(next_cosine), second, decide, decisiveness(value), lead_of(value)
        )
        p = evidence.score(row)
        key = entry_key(partition, cached)
        if cosine < self.min_cosine or not evidence.allows(key, float(cosine), p, row):
            self.refusals["learned_threshold"] += 1
            near = _same_question(cached) != _same_question(text) and self._near_miss(
                evidence, key, float(cosine), p, row
            )
            return None, Candidate(partition, cached, p, False, float(cosine), tuple(map(float, row)), near, text)
        self.recency.move_to_end((partition, id_))
        hit = self._hit(partition, part, id_, key, p)
        return hit, Candidate(partition, cached, p, hit is not None, float(cosine), tuple(map(float, row)), asked=text)

    def _near_miss(self, evidence: PooledEvidence, key: str, cosine: float, p: float, row) -> bool:
        """Refused by the certified threshold (not by exploration, a veto or the tune floor) with p within the
        promotion margin below it."""
        if not self.promote_margin or cosine < self.min_cosine or evidence.vetoed(key, cosine):
            return False
        threshold = evidence.threshold(row)
        assert self.learner is not None, "pooled evidence comes with its learner"
        return min(threshold, 1 - self.learner.max_error) - self.promote_margin <= p < threshold

    def promote(self, partition: tuple, text: str, target: str, vector: np.ndarray | None = None) -> Entry | None:
        """Make `text` a key of `target`'s cached answer (a near-miss judged the same); None where `target` is
        gone (evicted) or is `text` itself. An alias of an alias points to the first one's target."""
        entry = self.entry_of(partition, target)
        if entry is None or _same_question(text) == _same_question(target):
            return None
        alias = Entry(
            entry.value, dict(entry.versions), tokens=entry.tokens, level="l2", alias_of=entry.alias_of or target
        )
        self.insert_many(partition, [text], [alias], None if vector is None else np.atleast_2d(vector))
        self.promotions += 1
        return alias

    def entry_of(self, partition: tuple, question: str) -> Entry | None:
        """The entry keyed by `question` (up to case and spacing) in `partition`, or None."""
        part = self.partitions.get(partition)
        id_ = part.ids.get(_same_question(question)) if part else None
        return None if part is None or id_ is None else part.entry(id_)

    def learn(self, candidate: Candidate, agreed: bool) -> None:
        """A verdict on `candidate`: did its cached answer agree with the naive answer to the question? A
        disagreement on a promoted key served to its very question demotes it (its judgement was wrong)."""
        evidence = self.evidence_for(candidate.partition)
        if evidence is not None and candidate.features and candidate.cosine is not None:
            evidence.observe(
                entry_key(candidate.partition, candidate.question),
                candidate.features,
                candidate.cosine,
                agreed,
                _same_question(candidate.asked),
            )
            return
        part = self.partitions.get(candidate.partition)
        id_ = part.ids.get(_same_question(candidate.question)) if part else None
        if not agreed and part is not None and id_ is not None and part.entry(id_).alias_of:
            del self.recency[(candidate.partition, id_)]
            self._drop(candidate.partition, id_)
            self.demotions += 1
        elif self.learner is not None:
            self.learner.observe(candidate.partition, _same_question(candidate.question), candidate.score, agreed)

    def value_of(self, partition: tuple, question: str):
        """The cached answer to `question` in `partition`, or None (evicted)."""
        entry = self.entry_of(partition, question)
        return None if entry is None else entry.value

    def insert(
        self,
        partition: tuple,
        text: str,
        value: Any,
        versions: Mapping[str, str] | None = None,
        tokens: int = 0,
        predictive: bool = False,
        vector: np.ndarray | None = None,
    ) -> Entry:
        """Add or replace the answer to `text`; replacing also ends a pending refresh of it."""
        entry = Entry(
            value,
            dict(self.book.current if versions is None else versions),
            tokens=tokens,
            level="l3" if predictive else "l2",
            predictive=predictive,
        )
        self.insert_many(partition, [text], [entry], None if vector is None else np.atleast_2d(vector))
        return entry

    def insert_many(
        self, partition: tuple, texts: list[str], entries: list[Entry], vectors: np.ndarray | None = None
    ) -> None:
        """Bulk load (a restart restoring its entries, a benchmark): one embedding batch, one index add."""
        part = self.partitions.get(partition)
        if part is None:
            part = self.partitions[partition] = _Partition(VectorIndex(self.embedder.dim, self.max_exact))
        new: dict[str, tuple[int, str, Entry]] = {}  # question -> (position in texts, text, entry)
        for i, (text, entry) in enumerate(zip(texts, entries)):
            norm = _same_question(text)
            if norm in part.ids:
                held = part.entry(part.ids[norm])
                if held.alias_of and not entry.alias_of and not self.book.stale(held.versions):
                    continue  # a judged key keeps its answer while it is fresh
                part.keep(part.ids[norm], entry)
                self.recency.move_to_end((partition, part.ids[norm]))
                self.refresh.done(entry_key(partition, text))
            else:
                new[norm] = (new[norm][0] if norm in new else i, text, entry)
        if not new:
            return
        added = list(new.values())
        if vectors is None:
            vectors = self.embedder.embed([text for _, text, _ in added])
        else:
            vectors = vectors[[i for i, _, _ in added]]
        for id_, norm, (_, text, entry) in zip(part.index.add(vectors), new, added):
            part.ids[norm], part.texts[id_] = id_, text
            part.keep(id_, entry)
            self.recency[(partition, id_)] = None
        while len(self.recency) > self.max_entries:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        (partition, id_), _ = self.recency.popitem(last=False)
        self._drop(partition, id_)
        self.evictions += 1

    def _drop(self, partition: tuple, id_: int) -> None:
        part = self.partitions[partition]
        part.index.remove(id_)
        del part.ids[_same_question(part.texts.pop(id_))], part.entries[id_]
        if not part.texts:
            del self.partitions[partition]

    def holds(self, partition: tuple, text: str) -> bool:
        """An entry for this very question (up to case and spacing) exists: no embedding needed."""
        part = self.partitions.get(partition)
        return part is not None and _same_question(text) in part.ids

    def __len__(self) -> int:
        return len(self.recency)
