"""The records on Jev's topics. JSON on the wire, no Faust metadata, so any consumer reads them."""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import faust

TIERS = ("rules", "cache_l1", "cache_l2", "cache_l3", "coarse", "fine", "llm", "fallback")
_SCALARS = (type(None), str, int, float, bool)


UNIONS = (typing.Union, types.UnionType)  # Optional[X] and X | None (how annotations now spell it)


class Record(faust.Record, abstract=True, include_metadata=False, serializer="json"):
    """Base of every Jev record.

    Decoding and encoding are eager and compiled per class: Faust's own path converts nested records lazily
    through generic machinery, which cost ~50 µs per Work on every hop between stages (~15 µs this way), and
    left a malformed nested record to fail later, inside an agent. Here it fails in decoding, with the field
    named, so the message is dead-lettered."""

    @classmethod
    def from_data(cls, data, *, preferred_type=None) -> Record:
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__} must be a JSON object, got {type(data).__name__}")
        record = cls.__new__(cls)
        fields = record.__dict__
        fields["__evaluated_fields__"] = _all_fields(cls)  # every field is converted: Faust skips its lazy pass
        for field, nested, required, default in _plan(cls):
            value = data.get(field)
            if value is None and required:
                if field not in data or nested is not None:
                    raise TypeError(f"{cls.__name__}.{field} is required")
            elif value is None:
                value = default if isinstance(default, _SCALARS) else _fresh(default)
            elif nested is not None:
                many, sub = nested
                if not many:
                    value = sub.from_data(value)
                elif isinstance(value, list):
                    value = [sub.from_data(item) for item in value]
                else:
                    raise TypeError(f"{cls.__name__}.{field} must be a list, got {type(value).__name__}")
            fields[field] = value
        return record

    def derive(self, *objects, **fields) -> Record:
        """A copy with `fields` replaced (shallow, like dataclasses.replace; Faust's rebuilds the whole record)."""
        if objects:
            return super().derive(*objects, **fields)
        unknown = fields.keys() - _all_fields(type(self))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        record = type(self).__new__(type(self))
        record.__dict__.update(self.__dict__)
        record.__dict__.update(fields)
        if isinstance(self.__evaluated_fields__, set):
            record.__evaluated_fields__ = set(self.__evaluated_fields__)
        return record

    def to_representation(self) -> dict:
        """The record as plain JSON-ready data, nested records included."""
        out = {}
        fields = self.__dict__
        for field, nested, _, _ in _plan(type(self)):
            value = fields[field]
            if nested is not None and value is not None:
                value = [item.to_representation() for item in value] if nested[0] else value.to_representation()
            out[field] = value
        return out


def _fresh(default):
    """A mutable default, copied so records never share it ([] / {} / a default record)."""
    if isinstance(default, faust.Record):
        return type(default).from_data(default.to_representation())
    return copy.deepcopy(default)


def _is_record(tp) -> bool:
    return isinstance(tp, type) and issubclass(tp, faust.Record)


A = TypeVar("A")
T = TypeVar("T")


def cached(fn: Callable[[A], T]) -> Callable[[A], T]:
    """functools.cache for a function of one class or type, typed as the function it wraps (mypy takes a record
    class for unhashable: the __hash__ it reads is its instances')."""
    return typing.cast(Callable[[A], T], functools.cache(fn))


@cached
def _all_fields(cls: type[faust.Record]) -> frozenset:
    return frozenset(cls._options.fields)


@cached
def _plan(cls: type[faust.Record]) -> tuple:
    """Per field: (name, (many, record type) when it holds records, required, default)."""
    plan = []
    for field, tp in cls._options.fields.items():
        args = typing.get_args(tp)
        if _is_record(tp):
            nested = (False, tp)
        elif typing.get_origin(tp) is list and args and _is_record(args[0]):
            nested = (True, args[0])
        elif typing.get_origin(tp) in UNIONS and any(map(_is_record, args)):
            nested = (False, next(filter(_is_record, args)))
        else:
            nested = None
        plan.append((field, nested, field not in cls._options.defaults, cls._options.defaults.get(field)))
    return tuple(plan)


class Turn(Record):
    role: str
    content: str
    ts: float | None = None  # unix seconds


class Candidate(Record):
    id: str
    text: str


class TemplateRef(Record):
    id: str
    version: str = "1"
    variables: dict[str, Any] = {}


class Contracts(Record):
    max_input_tokens: int = 8000
    max_output_tokens: int = 256
    min_output_tokens: int = 0


class Request(Record):
    """What an upstream system asks: choose among candidates (decide) or answer (generate)."""

    request_id: str
    tenant: str
    service: str
    decision_type: str
    state: Any  # text, or a JSON object of state fields
    kind: str = "decide"
    business_line: str = ""
    session_id: str = ""
    user_id: str = ""
    history: list[Turn] = []
    candidates: list[Candidate] = []
    template: TemplateRef | None = None
    model: str = ""
    contracts: Contracts = Contracts()
    deadline_ms: int = 0  # the caller's deadline, ms from admission (0: none); once past, no model tier runs
    business_event: str = ""
    created_at: float = 0.0
    human_decision: str = ""
    stream: bool = False  # generate only: the answer also goes out as ordered Chunks on jev.chunks.v1
    client: str = ""  # web | mobile (empty = web): the chunk size and pace of a stream
    question_type: str = ""  # factual | creative (fact works too); empty = classified by rules. Sets the length


class Ranked(Record):
    id: str
    score: float


class Decision(Record):
    request_id: str
    tier: str
    action_id: str = ""
    text: str = ""
    ranking: list[Ranked] = []
    confidence: float = 0.0
    chain: list[str] = []
    input_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    nominal_tokens: int = 0
    cost: float = 0.0
    latency_ms: float = 0.0  # admission to the decision's postprocess: queue_ms + service
    queue_ms: float = 0.0  # admission to the start of the work that decided it (queueing behind earlier work)
    error: str = ""
    tenant: str = ""  # whose request it answers: the Sender also sends it to that tenant's reply topic


class UsageEvent(Record):
    """One per stage per request: the metering spine (token names follow OTel GenAI)."""

    event_id: str
    request_id: str
    ts: float
    tenant: str
    service: str
    business_line: str
    session_id: str
    user_id: str
    decision_type: str
    stage: str
    stack: str
    model: str = ""
    input_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    nominal_tokens: int = 0
    candidates: int = 0
    beam: int = 0
    iteration: int = 0
    latency_ms: float = 0.0
    cost: float = 0.0
    outcome: str = "ok"
    business_event: str = ""
    prompt_bytes: int = 0  # ingest: the prompt as rendered for the model tiers (protocol expansion's numerator)
    compact_bytes: int = 0  # ingest: the same content in a compact encoding (its denominator)
    first_chunk_ms: float = 0.0  # a streamed answer: admission to its first chunk
    tokens_per_s: float = 0.0  # a streamed answer: its delivered tokens over the seconds it streamed
    # The model server's own count (its `usage`), which settles the bill; input/cache_read/output above are Jev's
    # count, which reserved the budget. count_source: jev (no server call), server, missing (the server reported no
    # usage: the server columns hold Jev's count) or mixed (some calls reported none: Jev's count stands in).
    server_input_tokens: int = 0
    server_cache_read_tokens: int = 0
    server_output_tokens: int = 0
    count_source: str = "jev"
    # A streamed answer: the tokens its chunks delivered to the client (the request model's tokenizer, as the chunks
    # count them). output_tokens counts what the generator generated; the rest was cleaned, cut or withheld.
    delivered_tokens: int = 0


BILLED = ("input_tokens", "cache_read_tokens", "output_tokens")  # Jev's count, in pricing.cost's order
SERVER_BILLED = tuple(f"server_{name}" for name in BILLED)  # the model server's count of the same tokens


@dataclasses.dataclass
class TokenCounters:
    """The token counters of a UsageEvent, by its field names: the scoring ledger sums them per section and each
    section's event carries them as they are. Defined here once; UsageEvent's own fields (its wire format) are
    checked against them on import."""

    input_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    nominal_tokens: int = 0
    candidates: int = 0
    beam: int = 0
    server_input_tokens: int = 0
    server_cache_read_tokens: int = 0
    server_output_tokens: int = 0

    def counters(self) -> dict[str, int]:
        """The counters by name, as UsageEvent fields."""
        return {name: getattr(self, name) for name in COUNTERS}


COUNTERS = tuple(f.name for f in dataclasses.fields(TokenCounters))
if any(UsageEvent._options.fields.get(name) is not int for name in COUNTERS):
    raise TypeError("UsageEvent must have every TokenCounters counter as an int field")


class Chunk(Record):
    """One piece of a streamed answer, on jev.chunks.v1 keyed by request_id: `seq` counts from 0 and the last
    chunk has `final` set (its text may be empty). `progress` is the percentage of the answer's output length
    generated so far, never part of the text. The Decision with the totals follows on jev.decisions.v1.
    Delivery is at-least-once: a redelivered request streams again with the same seq numbers."""

    request_id: str
    seq: int
    text: str
    tokens: int  # in this chunk, in the request model's tokenizer
    tokens_so_far: int
    progress: int  # 0..100
    final: bool = False
    ts: float = 0.0  # unix seconds when the chunk was released
    tenant: str = ""  # whose request it answers: the Sender sends it to that tenant's reply topic


class Rejection(Record):
    """A dead letter: why, where, and the original bytes (as latin-1 text, so any bytes survive JSON)."""

    reason: str
    detail: str
    stage: str
    original: str
    ts: float
    request_id: str = ""
    retry_after_s: float = 0.0  # rate_limited: the seconds after which the tenant may send again
    tenant: str = ""  # the request's tenant where known: its reply topic gets this without `original`


class Control(Record):
    """Latest value per key wins: kill switches, budgets, template/prompt/model versions."""

    kind: str  # switch | budget | version | tune (a mechanism's knob, e.g. cache.l2.min_similarity)
    key: str
    value: Any
    ts: float = 0.0


class Alert(Record):
    rule: str
    severity: str
    scope: str
    message: str
    value: float
    threshold: float
    query: str = ""
    ts: float = 0.0


class Work(Record):
    """A request on its way through the internal stages, with what each stage learned. After distill the
    request's history is emptied: `context` holds what is kept of it, and later hops do not carry it again."""

    request: Request
    admitted_at: float
    model: str
    sections: dict[str, int] = {}
    context: str = ""
    context_tokens: int = 0
    dropped_turns: list[str] = []  # distill audit: "index:layer:reason" per history turn left out
    candidate_tokens: list[int] = []
    cache_key: str = ""
    tier_cap: str = ""  # set when a budget degrades the request: the most expensive tier it may use
    refresh: bool = False  # re-scoring a stale cache entry: refill the caches, send no second decision
    predictive: bool = False  # an L3 pre-answer of a likely follow-up (also a refresh: no decision is sent)
    cache_match: dict[str, Any] = {}  # L2 candidate (partition, question, score, served): what a verdict teaches
    decision: Decision | None = None
    budget_holds: dict[str, str] = {}  # hard budget key -> the lease its tokens were reserved against
    budget_tokens: int = 0  # tokens reserved against each of those leases (the request's worst case)
    shadow: str = ""  # "served": sampled for shadow agreement; "naive": its twin, decided the naive way;
    # "promote": a near-miss's naive twin, judged against its L2 candidate's cached answer (streams/cache/stage.py)
    mechanisms: list[str] = []  # on a "served" work: the saving mechanisms that acted on it (streams.shadow)

    def decided(self) -> Decision:
        """Its decision, for the stages after scoring (postprocess, shadow), which only ever see decided works."""
        if self.decision is None:
            raise ValueError(f"work {self.request.request_id!r} reached a stage after scoring without a decision")
        return self.decision


class BudgetEvent(Record):
    """One event of a hard budget's lease log (the budget topic, keyed by budget key, so one partition owns each
    budget): a stage process asks for a slice (`lease`), the owner grants it (`grant`, also sent to the holder on
    the leases topic), decisions settle against it wherever they complete (`settle`), the holder hands back what it
    did not use (`return`), and the owner takes back what a lease still holds once it can no longer be spent
    (`reclaim`). The owner's state is the fold of grant, settle, return and reclaim events."""

    kind: str  # lease | grant | settle | return | reclaim
    key: str  # budget key, e.g. tenant:acme@day
    holder: str = ""  # the stage process holding the lease
    lease_id: str = ""
    request: str = ""  # id of the lease request a grant answers (a redelivered request is granted once)
    window: str = ""  # the budget period the lease belongs to, e.g. 2026-12-01
    tokens: int = 0  # lease: asked; grant: granted; return: handed back
    reserved: int = 0  # settle: the reservations' worst case being settled
    actual: int = 0  # settle: tokens actually spent
    expires: float = 0.0  # grant: the holder reserves against the lease until then
    ts: float = 0.0


class Verdict(Record):
    """A shadow verdict: a sampled request's served decision against the naive one (full context, no cache, top
    tier only), attributed to every saving mechanism that acted on the served request. `agreed` is fidelity to
    the naive path; where the request carries a label (human_decision), `kept` says the served decision was no
    less accurate than the naive one, else it equals `agreed`."""

    request_id: str
    ts: float
    tenant: str
    service: str
    decision_type: str
    kind: str
    mechanisms: list[str]
    agreed: bool
    kept: bool
    similarity: float = 0.0  # generate requests: similarity of the two answers; decide: 1.0 or 0.0
    served_tier: str = ""
    naive_tier: str = ""
    served_action: str = ""
    naive_action: str = ""
    labelled: bool = False
    served_correct: bool = False
    naive_correct: bool = False
    served_tokens: int = 0
    naive_tokens: int = 0
    nominal_tokens: int = 0


class WorkBatch(Record):
    """Internal topics carry micro-batches: one Kafka message per batch, not per request."""

    items: list[Work]


class UsageBatch(Record):
    events: list[UsageEvent]
