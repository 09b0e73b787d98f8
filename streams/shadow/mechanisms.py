"""The saving mechanisms a shadow verdict is attributed to, and how each is read off a served request.

A mechanism acted on a request when it saved tokens on it: a usage event of its section whose nominal tokens
exceed its actual ones (distill layers, rules, cascade, beam, multi-step descent, the context sent once for all
candidates, cleanup), a cache tier that
answered, a breaker or budget that cut the decision short, or ingest truncating the history to the contract.
"""
from __future__ import annotations

from typing import Iterable

from schemas.records import Decision, UsageEvent
from streams.usage.events import section_of as event_section

DISTILL_LAYERS = ("dedup", "domain", "semantic", "time")
SCORE_SECTIONS = {"rules": "rules", "cascade": "cascade", "beam": "beam", "hierarchy": "hierarchy",
                  "shared_context": "shared_context"}
CACHE_TIERS = {"cache_l1": "cache.l1", "cache_l2": "cache.l2", "cache_l3": "cache.l3", "rules": "rules"}
MECHANISMS = ("truncation", *(f"distill.{layer}" for layer in DISTILL_LAYERS), "cache.l1", "cache.l2", "cache.l3",
              "rules", "cascade", "beam", "hierarchy", "shared_context", "breakers", "budget", "cleanup")


def section_of(event: UsageEvent) -> str:
    """The mechanism inside the event's stage: the section of its event id (streams.usage.events)."""
    return event_section(event.event_id)


def saved(event: UsageEvent) -> bool:
    return event.nominal_tokens > event.input_tokens + event.output_tokens


def from_usage(events: Iterable[UsageEvent]) -> list[str]:
    """Mechanisms that saved tokens in these usage events (distill, scoring or postprocess events)."""
    found = []
    for event in events:
        section = section_of(event)
        if event.stage == "distill" and section in DISTILL_LAYERS and saved(event):
            found.append(f"distill.{section}")
        elif event.stage == "score" and section in SCORE_SECTIONS and saved(event):
            found.append(SCORE_SECTIONS[section])
        elif event.stage == "score" and section == "fallback":
            found.append("budget" if event.outcome == "degraded" else "breakers")
        elif event.stage == "postprocess" and section == "cleanup" and saved(event):
            found.append("cleanup")
    return found


def from_decision(decision: Decision) -> list[str]:
    """Mechanisms the served decision itself shows: the cache tier that answered, and in its chain (an exact
    hit keeps the chain its decision was made with, on the same prompt) the rule that answered, a cascade that
    pruned candidates (coarse:<backend>:<kept>/<offered>), a breaker that tripped (fallback:deadline,
    fallback:timeout, fallback:token_cap). A semantic or predictive hit answers with another question's decision:
    only the cache acted on this request."""
    found = [CACHE_TIERS[decision.tier]] if decision.tier in CACHE_TIERS else []
    if decision.tier in ("cache_l2", "cache_l3"):
        return found
    for step in decision.chain:
        if step.startswith("rules:"):
            found.append("rules")
        elif step.startswith(("fallback:deadline", "fallback:timeout", "fallback:token_cap")):
            found.append("breakers")
        elif step.startswith("coarse:") and "/" in step:
            kept, _, offered = step.rpartition(":")[2].partition("/")
            if kept.isdigit() and offered.isdigit() and int(kept) < int(offered):
                found.append("cascade")
    return merged(found)


def merged(*groups: Iterable[str]) -> list[str]:
    """One list, first occurrence order, no repeats."""
    return list(dict.fromkeys(m for group in groups for m in group))
