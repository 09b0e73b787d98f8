"""The distill stage: distill_work() on one Work item (kept history as context, savings as UsageEvents), and
Distiller, the stage as a step of the ingest agent."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping

from schemas.records import UsageEvent, Work
from streams.cache.exact import cache_key
from streams.core.switches import DISTILL_KEY
from streams.distill.core import distill
from streams.distill.policy import Policy, load_policy
from streams.text import tokens
from streams.text.prompt import render_context
from streams.usage.events import usage_event

log = logging.getLogger("jev.distill")

SWITCH = "distill"  # the whole stage; each layer has its own `distill.<layer>` switch


def history_budget(work: Work, policy: Policy) -> int | None:
    """The policy's budget, tightened to what the input contract leaves after state and candidates."""
    contract = work.request.contracts.max_input_tokens
    room = contract - work.sections.get("state", 0) - work.sections.get("candidates", 0) if contract else 0
    limits = [limit for limit in (policy.budget, room) if limit and limit > 0]
    return min(limits) if limits else None


def distill_work(work: Work, policy: Policy, switches: Mapping[str, bool], now: float) -> tuple[Work, list[UsageEvent]]:
    """A copy of `work` with context (kept turns with provenance markers, then the state),
    context_tokens (exact, for work.model) and dropped_turns (audit) set; one UsageEvent per layer
    that saved tokens, whose nominal_tokens count the saving once per candidate (a naive system
    re-sends the context with each)."""
    request = work.request
    if not switches.get(SWITCH, True) or not request.history:
        return work, []  # ingest rendered and counted this context (template and contract truncation included)
    messages = [{"role": t.role, "content": t.content, "ts": t.ts} for t in request.history]
    distilled = distill(
        messages, model=work.model, budget=history_budget(work, policy), policy=policy, switches=switches, now=now
    )
    context = render_context(request, distilled.lines)
    result = work.derive(
        context=context,
        context_tokens=tokens.count(context, work.model),
        dropped_turns=[f"{index}:{reason}" for index, reason in distilled.dropped],
    )
    copies = max(1, len(request.candidates))
    events = [
        usage_event(
            request,
            "distill",
            section=layer,
            model=work.model,
            input_tokens=0,
            nominal_tokens=saved * copies,
            candidates=len(request.candidates),
        )
        for layer, saved in distilled.saved_by_layer.items()
        if saved > 0
    ]
    return result, events


class Distiller:
    """Distill, then key each Work for the cache, inside the ingest agent. Distill is a pure function of one
    request with no state keyed by session, so a topic between ingest and distill bought nothing but one more
    encode, decode and Faust per-message cost per request."""

    def __init__(self, policies: str):
        self.configured = functools.lru_cache(maxsize=256)(lambda decision_type: load_policy(decision_type, policies))
        self.scale = 1.0  # distill.budget_scale: the shadow guard raises it when distillation loses agreement

    def policy_for(self, decision_type: str) -> Policy:
        policy = self.configured(decision_type)
        if self.scale == 1.0 or not policy.budget:
            return policy
        return dataclasses.replace(policy, budget=round(policy.budget * self.scale))

    def on_control(self, control) -> None:
        """A tune control `distill.budget_scale` = F multiplies every policy's history budget by F (>= 1)."""
        if control.kind == "tune" and control.key == DISTILL_KEY:
            try:
                self.scale = max(1.0, float(control.value))
            except (TypeError, ValueError):
                log.warning("ignoring %s=%r: expected a number >= 1", DISTILL_KEY, control.value)

    def __call__(
        self, works: list[Work], switches: Mapping[str, bool], now: float
    ) -> tuple[list[Work], list[UsageEvent]]:
        out, usage = [], []
        for work in works:
            try:
                work, events = distill_work(work, self.policy_for(work.request.decision_type), switches, now)
            except Exception:  # distill only saves tokens: on a defect the request goes on with ingest's context
                log.exception("distill failed on %s; its context is passed on undistilled", work.request.request_id)
                events = []
            work.cache_key = cache_key(work)
            if work.request.history:
                work.request = work.request.derive(history=[])  # the distilled context carries it from here
            out.append(work)
            usage.extend(events)
        return out, usage
