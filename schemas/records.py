"""The records on Jev's topics. JSON on the wire, no Faust metadata, so any consumer reads them."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import faust

TIERS = ("rules", "cache_l1", "cache_l2", "cache_l3", "coarse", "fine", "llm", "fallback")


class Record(faust.Record, abstract=True, include_metadata=False, serializer="json"):
    """Base of every Jev record."""


class Turn(Record):
    role: str
    content: str
    ts: Optional[float] = None  # unix seconds


class Candidate(Record):
    id: str
    text: str


class TemplateRef(Record):
    id: str
    version: str = "1"
    variables: Dict[str, Any] = {}


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
    history: List[Turn] = []
    candidates: List[Candidate] = []
    template: Optional[TemplateRef] = None
    model: str = ""
    contracts: Contracts = Contracts()
    deadline_ms: int = 800
    business_event: str = ""
    created_at: float = 0.0
    human_decision: str = ""


class Ranked(Record):
    id: str
    score: float


class Decision(Record):
    request_id: str
    tier: str
    action_id: str = ""
    text: str = ""
    ranking: List[Ranked] = []
    confidence: float = 0.0
    chain: List[str] = []
    input_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    nominal_tokens: int = 0
    cost: float = 0.0
    latency_ms: float = 0.0
    error: str = ""


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


class Rejection(Record):
    """A dead letter: why, where, and the original bytes (as latin-1 text, so any bytes survive JSON)."""
    reason: str
    detail: str
    stage: str
    original: str
    ts: float
    request_id: str = ""


class Control(Record):
    """Latest value per key wins: kill switches, budgets, template/prompt/model versions."""
    kind: str  # switch | budget | version
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
    """A request on its way through the internal stages, with what each stage learned."""
    request: Request
    admitted_at: float
    model: str
    sections: Dict[str, int] = {}
    context: str = ""
    context_tokens: int = 0
    dropped_turns: List[str] = []  # distill audit: "index:layer:reason" per history turn left out
    candidate_tokens: List[int] = []
    cache_key: str = ""
    tier_cap: str = ""  # set when a budget degrades the request: the most expensive tier it may use
    refresh: bool = False  # re-scoring a stale cache entry: refill the caches, send no second decision
    predictive: bool = False  # an L3 pre-answer of a likely follow-up (also a refresh: no decision is sent)
    decision: Optional[Decision] = None


class WorkBatch(Record):
    """Internal topics carry micro-batches: one Kafka message per batch, not per request."""
    items: List[Work]


class UsageBatch(Record):
    events: List[UsageEvent]
