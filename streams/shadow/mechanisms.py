"""The saving mechanisms a shadow verdict is attributed to, and how each is read off a served request.

A mechanism acted on a request when it saved tokens on it: a usage event of its section whose nominal tokens
exceed its actual ones (distill layers, rules, cascade, beam, multi-step descent, the context sent once for all
candidates, cleanup), a cache tier that
answered, a breaker or budget that cut the decision short, or ingest truncating the history to the contract.
"""

from __future__ import annotations

from collections.abc import Iterable

from schemas.records import Decision, UsageEvent
from streams.usage.events import section_of as event_section

DISTILL_LAYERS = ("dedup", "domain", "semantic", "time")
SCORE_SECTIONS = ("rules", "cascade", "beam", "hierarchy", "shared_context")
CACHE_TIERS = {"cache_l1": "cache.l1", "cache_l2": "cache.l2", "cache_l3": "cache.l3", "rules": "rules"}
MECHANISMS = (
    "truncation",
    *(f"distill.{layer}" for layer in DISTILL_LAYERS),
    "cache.l1",
    "cache.l2",
    "cache.l3",
    "rules",
    "cascade",
    "beam",
    "hierarchy",
    "shared_context",
    "breakers",
    "budget",
    "cleanup",
)


def mechanism_of(stage: str, section: str, outcome: str) -> str:
    """The saving mechanism a usage row of `stage` and `section` belongs to ('' for none: ingest, model calls,
    shadow work). The one mapping: MECHANISM_SQL says it to ClickHouse."""
    if stage == "distill" and section in DISTILL_LAYERS:
        return f"distill.{section}"
    if stage == "cache":
        return section.replace("cache_", "cache.", 1)
    if stage == "score" and section in SCORE_SECTIONS:
        return section
    if stage == "score" and section == "fallback":
        return "budget" if outcome == "degraded" else "breakers"
    if stage == "postprocess" and section == "cleanup":
        return "cleanup"
    return ""


def _sql_list(names: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{name}'" for name in names) + ")"


# mechanism_of over usage_events' columns (workers.analytics.agreement; migration 005's view
# usage_savings_by_mechanism, applied before this line existed, says the same: tests hold the three together)
MECHANISM_SQL = (
    f"multiIf(stage = 'distill' AND section IN {_sql_list(DISTILL_LAYERS)}, concat('distill.', section), "
    "stage = 'cache', replaceOne(section, 'cache_', 'cache.'), "
    f"stage = 'score' AND section IN {_sql_list(SCORE_SECTIONS)}, section, "
    "stage = 'score' AND section = 'fallback', if(outcome = 'degraded', 'budget', 'breakers'), "
    "stage = 'postprocess' AND section = 'cleanup', 'cleanup', '')"
)


def section_of(event: UsageEvent) -> str:
    """The mechanism inside the event's stage: the section of its event id (streams.usage.events)."""
    return event_section(event.event_id)


def saved(event: UsageEvent) -> bool:
    return event.nominal_tokens > event.input_tokens + event.output_tokens


def from_usage(events: Iterable[UsageEvent]) -> list[str]:
    """Mechanisms that saved tokens in these usage events (distill, scoring or postprocess events; a fallback
    acted whether it saved or not). The cache tier that answered is read off the decision (from_decision)."""
    found = []
    for event in events:
        section = section_of(event)
        mechanism = mechanism_of(event.stage, section, event.outcome)
        if mechanism and event.stage != "cache" and (saved(event) or section == "fallback"):
            found.append(mechanism)
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


def judged(acted: list[str], decision: Decision) -> list[str]:
    """The mechanisms a verdict judges, of those that `acted`. A fresh exact hit replays the decision the same
    distilled prompt gets now, so where another mechanism shaped that decision (distillation, a rule, the cascade,
    a breaker) a disagreement is that mechanism's, judged at its own floor; L1 is judged on the hits nothing else
    shaped and on stale hits (served once under an older prompt, model or template version). Held to the caches'
    floor for the cascade's disagreements, L1 was switched off by the guard, which only sent the same requests
    through the same cascade again at full cost."""
    if "cache.l1" in acted and len(acted) > 1 and decision.chain[:1] != ["cache_l1:stale"]:
        return [m for m in acted if m != "cache.l1"]
    return acted


def merged(*groups: Iterable[str]) -> list[str]:
    """One list, first occurrence order, no repeats."""
    return list(dict.fromkeys(m for group in groups for m in group))
