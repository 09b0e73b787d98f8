"""Warming the engine before traffic: every local tier called in English and Chinese, nothing left behind."""

from collections import Counter

from prometheus_client import REGISTRY

from streams.core import encodings
from streams.models import lexical as backends
from streams.scoring import microbatch, policy, rules
from streams.scoring.engine import Engine
from streams.scoring.language_routes import FineTiers
from streams.scoring.warmup import samples, warm


class Logged(backends.LexicalBackend):
    def __init__(self, name, log, remote=False):
        super().__init__()
        self.name = self.model = name
        self.log, self.remote = log, remote

    def score_many(self, items):
        self.log.extend([self.name] * len(items))
        return [self.score(c, cands) for c, cands in items]


def engine(english, multilingual, coarse=None):
    config = policy.parse("types:\n  ranking: {}\n  customer_service: {}\n")
    return Engine(
        coarse=coarse or backends.LexicalBackend(),
        fine=english,
        config=config,
        rules=rules.load(),
        fine_tiers=FineTiers(english, multilingual),
    )


def test_warm_up_calls_each_tier_in_both_languages_and_leaves_no_trace(monkeypatch):
    monkeypatch.setattr(microbatch, "PACE", microbatch.Pace())
    log = []
    coarse = Logged("coarse", log)
    eng = engine(Logged("en", log), Logged("zh", log), coarse)
    cache = encodings.shared()
    lookups = cache.hits + cache.misses
    warm(eng)
    assert Counter(log) == {"coarse": 8, "en": 4, "zh": 4}  # 2 types x 2 languages, twice; coarse for all
    assert not eng.counters and cache.hits + cache.misses == lookups
    assert {("coarse", "coarse"), ("en", "en"), ("zh", "zh")} <= set(microbatch.PACE.seconds_per_text)


def test_breakers_the_warm_up_trips_stay_out_of_the_metrics():
    """A 10-token cap trips the token breaker on every warm-up decision: no trip, no fallback reaches /metrics."""

    def moved():
        return sum(
            REGISTRY.get_sample_value(name, labels) or 0.0
            for name, labels in (
                ("jev_breaker_trips_total", {"breaker": "token_cap"}),
                ("jev_fallbacks_total", {"reason": "token_cap"}),
            )
        )

    eng = engine(Logged("en", []), Logged("zh", []))
    eng.config = policy.parse("types:\n  ranking: {token_cap: 10}\n")
    before = moved()
    warm(eng)
    assert moved() == before and not eng.counters
    eng.decide_batch(samples(["ranking"], "gpt-4o-mini")[:1])
    assert moved() == before + 2  # the engine itself still meters its trips


def test_a_tier_on_a_model_server_is_not_warmed_from_here():
    log = []
    warm(engine(Logged("en", log), Logged("served", log, remote=True)))
    assert "served" not in log and log.count("en") == 4


def test_samples_are_one_english_and_one_chinese_decision_per_type():
    works = samples(["ranking", "customer_service"], "gpt-4o-mini")
    assert [(w.request.decision_type, w.request.request_id.rsplit("/", 1)[1]) for w in works] == [
        ("ranking", "en"),
        ("ranking", "zh"),
        ("customer_service", "en"),
        ("customer_service", "zh"),
    ]
    assert all(len(w.request.candidates) == 6 and w.context_tokens > 0 for w in works)
