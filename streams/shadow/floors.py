"""Agreement floors: the share of verdicts a mechanism must keep (its lower confidence bound must reach it).

Each default names the measurement it comes from. A floor is fidelity to the naive path (or, on labelled
requests, not losing accuracy to it), so a mechanism that measured near-perfect agreement gets a floor near
it, and one that measured lower at equal accuracy gets a floor under its measured lower bound.
"""

from __future__ import annotations

from streams.shadow.mechanisms import DISTILL_LAYERS, MECHANISMS

# (floor, the measurement it comes from)
DEFAULTS: dict[str, tuple[float, str]] = {
    "cache.l1": (
        0.97,
        "an exact hit replays the decision of the same prompt: judged only on the hits no other "
        "mechanism shaped and on stale ones (mechanisms.judged), where it disagrees only if the "
        "model changed; held to the caches' floor",
    ),
    "cache.l2": (
        0.97,
        "bench/cache_precision.py, STS-B test: precision 0.972 of MiniLM + verification; the floor "
        "is that precision rounded down",
    ),
    "cache.l3": (0.97, "pre-answers are L2 entries: the L2 floor"),
    "rules": (
        0.90,
        "rules encode policy the naive model does not know (the demo: rules agreed with MiniLM on 2 of 5 "
        "sampled risk decisions), so the guard judges them on labelled requests only, by accuracy; no "
        "labelled measurement exists yet: the cascade's floor",
    ),
    "cascade": (
        0.90,
        "issue 18: on 200 hard held-out decisions the cascade agreed with fine-only on 94.5% at equal "
        "accuracy; its Wilson lower bound (z 1.645) is 0.912, so 0.90 keeps that cascade",
    ),
    "beam": (0.90, "the dynamic beam is part of the cascade measured above: the cascade's floor"),
    "hierarchy": (0.90, "a multi-step decision prunes like the cascade: the cascade's floor"),
    "shared_context": (
        0.97,
        "the fine tier scores each candidate against the same context whether it is sent once or "
        "per candidate (MiniLM and lexical scores are per pair): the caches' floor; no knob",
    ),
    "truncation": (0.97, "truncation drops the oldest turns, as distillation's time layer does: distillation's floor"),
    "breakers": (
        0.90,
        "a breaker trades the decision for a bounded cost and latency by design (fallback action or "
        "lexical order): judged on labelled requests only, at the cascade's floor; it only alerts",
    ),
    "budget": (
        0.90,
        "a budget degrades a decision by design: judged on labelled requests only, at the cascade's "
        "floor; it only alerts",
    ),
    "cleanup": (
        0.97,
        "cleanup never changes an action, only an answer's wording (token-overlap F1 against the raw "
        "naive answer, JEV_SHADOW_TEXT_AGREE): the caches' floor",
    ),
    **{
        f"distill.{layer}": (
            0.97,
            "bench/distill.py, 3,000 ShareGPT conversations: last_user_kept 1.0, none grew; "
            "distillation must keep the decision: the caches' floor",
        )
        for layer in DISTILL_LAYERS
    },
}
assert set(DEFAULTS) == set(MECHANISMS)


def parse_floors(text: str) -> dict[str, float]:
    """The default floors with JEV_SHADOW_FLOORS applied ('cache.l2=0.98,distill.*=0.95')."""
    floors = {name: floor for name, (floor, _) in DEFAULTS.items()}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, value = part.partition("=")
        names = [n for n in floors if n.startswith(name[:-1])] if name.endswith("*") else [name]
        if not names or any(n not in floors for n in names):
            raise ValueError(f"JEV_SHADOW_FLOORS: unknown mechanism {name!r}; known: {', '.join(floors)}")
        try:
            floor = float(value)
        except ValueError:
            raise ValueError(f"JEV_SHADOW_FLOORS: {part!r}: write <mechanism>=<share>, e.g. cache.l2=0.97") from None
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"JEV_SHADOW_FLOORS: {part!r}: a floor must be within 0..1")
        floors.update(dict.fromkeys(names, floor))
    return floors
