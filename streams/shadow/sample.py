"""Which requests are also decided the naive way, and their naive twins.

Ingest samples JEV_SHADOW_RATE of each decision type by a stable hash of the request id, so a redelivery is sampled
again or not at all. The twin holds the whole context and goes to the scoring workers keyed by the served Work's
cache key, so both decisions meet in the process that owns that partition. Shadow yields first: nothing is sampled
from a full or over-budget micro-batch, and those skips are metered.
"""

from __future__ import annotations

import hashlib

from schemas.records import UsageEvent, Work
from streams.output.chunks import StreamConfig, reserved_output
from streams.shadow import mechanisms
from streams.text import tokens
from streams.text.prompt import render_context
from streams.usage.events import usage_event


def parse_rates(text: str) -> tuple[float, dict[str, float]]:
    """'0.02' or '0.02,risk_interception=0.1' -> (default share, per decision type)."""
    default, per_type = 0.0, {}
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        name, _, value = part.rpartition("=")
        try:
            share = float(value)
        except ValueError:
            raise ValueError(
                f"JEV_SHADOW_RATE: {part!r} is not a share; write 0.02 or 0.02,<decision_type>=0.1"
            ) from None
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"JEV_SHADOW_RATE: {part!r}: a share must be within 0..1")
        if name:
            per_type[name.strip()] = share
        else:
            default = share
    return default, per_type


def bucket(request_id: str) -> float:
    """A stable share in [0, 1) per request id."""
    digest = hashlib.blake2b(f"shadow:{request_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class Sampler:
    def __init__(self, rate: str, stream_config: StreamConfig | None = None):
        """`stream_config`: the streamed answers' lengths the served answers use (stream.yaml), which their twins
        keep."""
        self.default, self.per_type = parse_rates(rate)
        self.stream_config = stream_config

    def rate(self, decision_type: str) -> float:
        return self.per_type.get(decision_type, self.default)

    def sampled(self, work: Work) -> bool:
        req = work.request
        return not work.refresh and bucket(req.request_id) < self.rate(req.decision_type)

    def take(self, admitted: list[Work], pressured: str = "") -> tuple[dict[tuple[str, str], Work], list[UsageEvent]]:
        """Naive twins of the sampled admitted works (before distill), keyed by (tenant, request id), the served
        ones marked; under pressure (`pressured` names it: load, budget) none, and a usage row per skipped
        sample."""
        twins, skipped = {}, []
        for work in admitted:
            if not self.sampled(work):
                continue
            if pressured or work.tier_cap:
                skipped.append(
                    usage_event(work.request, "shadow", section="skipped", outcome=f"skipped:{pressured or 'budget'}")
                )
                continue
            work.shadow = "served"
            twins[work.request.tenant, work.request.request_id] = naive_twin(work, self.stream_config)
        return twins, skipped

    @staticmethod
    def pair(twins: dict[tuple[str, str], Work], distilled: list[Work], saved: list[UsageEvent]) -> list[Work]:
        """The twins keyed like their served works (same cache key), and the served works told which of
        truncation and the distill layers acted on them."""
        if not twins:
            return []
        events: dict[tuple[str, str], list[UsageEvent]] = {}
        for event in saved:
            if (event.tenant, event.request_id) in twins:
                events.setdefault((event.tenant, event.request_id), []).append(event)
        out = []
        for work in distilled:
            twin = twins.get((work.request.tenant, work.request.request_id))
            if twin is None:
                continue
            twin.cache_key = work.cache_key
            dropped = [f"distill.{d.split(':')[1]}" for d in work.dropped_turns if d.count(":") >= 1]
            work.mechanisms = mechanisms.merged(
                work.mechanisms,
                dropped,
                mechanisms.from_usage(events.get((work.request.tenant, work.request.request_id), ())),
            )
            out.append(twin)
        return out


def naive_twin(work: Work, stream_config: StreamConfig | None = None) -> Work:
    """The request as a naive system would send it: the whole history rendered (no truncation, no
    distillation); a template's rendering is kept (it is the prompt, not a saving). A streamed request's
    twin is answered whole, not streamed: it is judged, never sent to the caller, and a naive system does not
    pace an answer. It asks for no more output than the served answer may spend (a stream's planned length, from
    `stream_config`), so the two answers compare like for like and shadow work never holds a model server's slot
    longer than the served answer does. The served work records whether ingest truncated it."""
    req = work.request
    context = work.context if req.template else render_context(req)
    if context != work.context:
        work.mechanisms = mechanisms.merged(work.mechanisms, ["truncation"])
    context_tokens = work.context_tokens if context == work.context else tokens.count(context, work.model)
    limit = reserved_output(req, stream_config)
    contracts = req.contracts.derive(
        max_output_tokens=limit, min_output_tokens=min(req.contracts.min_output_tokens, limit)
    )
    return Work(
        request=req.derive(history=[], stream=False, contracts=contracts),
        admitted_at=work.admitted_at,
        model=work.model,
        context=context,
        context_tokens=context_tokens,
        candidate_tokens=list(work.candidate_tokens),
        shadow="naive",
    )
