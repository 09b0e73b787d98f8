"""Building the engine from settings (the scoring worker's, `jev score`'s), and the Work an offline caller scores."""
from __future__ import annotations

import time

from schemas.records import Request, Work
from streams import tokens
from streams.ingest.prompt import render_context
from streams.backends import pool as pool_mod, registry
from streams.models import configure as configure_models
from streams.scoring import policy as policy_mod, rules as rules_mod
from streams.scoring.engine import Engine


def build_engine(settings, mode: str = "cascade") -> Engine:
    """Tiers from decision_types.yaml (settings.backend, when not `auto`, names the fine tier) and the generator,
    all models of the pool (settings.models); rules from settings.rules. Models load here, once."""
    configure_models(settings.model_threads)
    pool = pool_mod.load(settings.models)
    config = policy_mod.load(settings.decision_types)
    fine = settings.backend if settings.backend != "auto" else config.tiers["fine"]
    escalation = config.tiers.get("escalation", "none")
    from streams.postprocess import stream as stream_config

    return Engine(coarse=registry.scorer(config.tiers["coarse"], pool), fine=registry.scorer(fine, pool),
                  escalation=None if escalation in ("", "none") else registry.scorer(escalation, pool),
                  config=config, rules=rules_mod.load(settings.rules), mode=mode,
                  generator=registry.generator(settings.generator, pool, settings.default_model),
                  reservation_ttl_s=settings.budget_reservation_ttl_s if settings.budget_leases else 0.0,
                  stream_config=stream_config.load(settings.stream_config), patterns=settings.postprocess_patterns)


def known_decision_types(path: str = "") -> set[str]:
    return policy_mod.known_decision_types(path)


def work_for(request: Request, model: str) -> Work:
    """The Work ingest would hand on, for offline scoring (`jev score`, benchmarks): no distillation."""
    context = render_context(request)
    return Work(request=request, admitted_at=time.time(), model=model, context=context,
                context_tokens=tokens.count(context, model),
                candidate_tokens=[tokens.count(c.text, model) for c in request.candidates])
