"""Building the engine from settings (the scoring worker's, `jev score`'s), and the Work an offline caller scores."""

from __future__ import annotations

import time

from schemas.records import Request, Work
from streams.core import encodings
from streams.models import pool as pool_mod
from streams.models import registry
from streams.models.loaded import configure as configure_models
from streams.scoring import policy as policy_mod
from streams.scoring import rules as rules_mod
from streams.scoring.engine import Engine
from streams.scoring.language_routes import FineTiers, multilingual_name
from streams.text import tokens
from streams.text.prompt import render_context


def build_engine(settings, mode: str = "cascade", pool: pool_mod.Pool | None = None) -> Engine:
    """Tiers from decision_types.yaml (settings.backend, when not `auto`, names the fine tier) and the generator,
    all models of the pool (`pool`, else settings.models); rules from settings.rules. Models load here, once."""
    configure_models(settings.model_threads)
    encodings.configure(settings.encoding_cache_mb)
    pool = pool or pool_mod.load(settings.models)
    config = policy_mod.load(settings.decision_types)
    fine = settings.backend if settings.backend != "auto" else config.tiers["fine"]
    escalation = config.tiers.get("escalation", "none")
    from streams.output import chunks as stream_config

    fine_tiers = fine_tiers_for(config, registry.scorer(fine, pool), settings.backend, pool)
    return Engine(
        coarse=registry.scorer(config.tiers["coarse"], pool),
        fine=fine_tiers.english,
        fine_tiers=fine_tiers,
        escalation=None if escalation in ("", "none") else registry.scorer(escalation, pool),
        config=config,
        rules=rules_mod.load(settings.rules),
        mode=mode,
        generator=registry.generator(settings.generator, pool, settings.default_model),
        reservation_ttl_s=settings.budget_reservation_ttl_s if settings.budget_leases else 0.0,
        stream_config=stream_config.load(settings.stream_config),
        patterns=settings.postprocess_patterns,
    )


def fine_tiers_for(
    config: policy_mod.Config, english, backend_setting: str = "auto", pool: pool_mod.Pool | None = None
) -> FineTiers:
    """The fine tier per language and per decision type, each a model of the pool. A fine model named in the
    settings (JEV_BACKEND) serves every language; each model loads once."""
    loaded = {english.name: english}

    def load(name: str):
        if name not in loaded:
            loaded[name] = registry.scorer(name, pool)
        return loaded[name]

    multilingual = "none" if backend_setting != "auto" else multilingual_name(config.tiers["fine_multilingual"])
    return FineTiers(
        english,
        None if multilingual in ("", "none") else load(multilingual),
        {t: load(p.fine) for t, p in config.policies.items() if p.fine},
    )


def known_decision_types(path: str = "") -> set[str]:
    return policy_mod.known_decision_types(path)


def work_for(request: Request, model: str) -> Work:
    """The Work ingest would hand on, for offline scoring (`jev score`, benchmarks): no distillation."""
    context = render_context(request)
    return Work(
        request=request,
        admitted_at=time.time(),
        model=model,
        context=context,
        context_tokens=tokens.count(context, model),
        candidate_tokens=[tokens.count(c.text, model) for c in request.candidates],
    )
