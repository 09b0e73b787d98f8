"""Prometheus metrics, declared once. Label values come from small fixed sets (stage, tier, cache level,
token kind) or from configured names (decision type), capped at MAX_LABEL_VALUES distinct values per label
with the rest counted as "other": per-user and per-request detail belongs in ClickHouse, not here.

Workers call start_metrics_server(settings) once, then the observe_* helpers.
"""
from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server

MAX_LABEL_VALUES = 50
TOKEN_KINDS = ("input", "cache_read", "output", "nominal")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

TOKENS = Counter("jev_tokens", "Tokens metered into ClickHouse (after dedup), by stage and kind.",
                 ["stage", "kind", "decision_type"])
COST = Counter("jev_cost_usd", "Cost metered into ClickHouse, in USD.", ["stage", "decision_type"])
DECISIONS = Counter("jev_decisions", "Decisions made, by the tier that answered.", ["tier", "decision_type"])
CACHE = Counter("jev_cache_lookups", "Cache look-ups by level and result.", ["level", "result"])
STAGE_LATENCY = Histogram("jev_stage_latency_seconds", "Time a request spent in each stage.", ["stage"],
                          buckets=LATENCY_BUCKETS)
FALLBACKS = Counter("jev_fallbacks", "Decisions that fell back to rules, by reason.", ["reason"])
BREAKERS = Counter("jev_breaker_trips", "Circuit breakers tripped, by breaker.", ["breaker"])
CONSUMER_LAG = Gauge("jev_consumer_lag_messages", "Messages behind the end of the topic, per consumer group.",
                     ["group", "topic"])
SINK_ROWS = Counter("jev_usage_rows", "Usage rows the sink handled: inserted, or dropped as redelivered.",
                    ["result"])
SINK_SECONDS = Histogram("jev_usage_insert_seconds", "Time of one usage-sink insert (dedup look-up included).",
                         buckets=LATENCY_BUCKETS)
STREAM_FIRST_CHUNK = Histogram("jev_stream_first_chunk_seconds", "Streamed answers: admission to the first chunk.",
                               ["client", "question_type"], buckets=LATENCY_BUCKETS)
STREAM_RATE = Histogram("jev_stream_tokens_per_second", "Streamed answers: output tokens per second streamed.",
                        ["client", "question_type"], buckets=(8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096))
STREAM_CHUNKS = Counter("jev_stream_chunks", "Chunks of streamed answers released.", ["client"])
SHADOW_VERDICTS = Counter("jev_shadow_verdicts", "Shadow verdicts by saving mechanism ('all': every verdict) and "
                          "result (kept: agreed with the naive path, or no less accurate where labelled).",
                          ["mechanism", "result"])
SHADOW_AGREEMENT = Gauge("jev_shadow_agreement", "Share of shadow verdicts each saving mechanism kept, over the "
                         "guard's current window ('all': every verdict this process judged).", ["mechanism"])

_seen: dict[str, set[str]] = {}


def bounded(label: str, value: str) -> str:
    """`value` while fewer than MAX_LABEL_VALUES distinct values were seen for `label`, else "other"."""
    seen = _seen.setdefault(label, set())
    if value in seen:
        return value
    if len(seen) >= MAX_LABEL_VALUES:
        return "other"
    seen.add(value)
    return value


def start_metrics_server(settings) -> bool:
    """Serve /metrics on settings.metrics_port (0 = off); True when started."""
    if not settings.metrics_port:
        return False
    start_http_server(settings.metrics_port, registry=REGISTRY)
    return True


def observe_usage(events) -> None:
    """Tokens and cost of metered UsageEvents (the sink calls this for what it inserted), summed per label set
    first: one counter update per stage and decision type, not per event."""
    sums: dict[tuple[str, str], list[float]] = {}
    for e in events:
        f = e.__dict__
        acc = sums.setdefault((f["stage"], f["decision_type"]), [0, 0, 0, 0, 0.0])
        acc[0] += f["input_tokens"]
        acc[1] += f["cache_read_tokens"]
        acc[2] += f["output_tokens"]
        acc[3] += f["nominal_tokens"]
        acc[4] += f["cost"]
    for (stage, dtype), acc in sums.items():
        stage, dtype = bounded("stage", stage), bounded("decision_type", dtype)
        for kind, n in zip(TOKEN_KINDS, acc):
            if n:
                TOKENS.labels(stage, kind, dtype).inc(n)
        if acc[4]:
            COST.labels(stage, dtype).inc(acc[4])


def observe_sink(inserted: list, dropped: int, seconds: float) -> None:
    observe_usage(inserted)
    SINK_ROWS.labels("inserted").inc(len(inserted))
    if dropped:
        SINK_ROWS.labels("duplicate").inc(dropped)
    SINK_SECONDS.observe(seconds)


def observe_decision(decision, decision_type: str, stage_latencies_ms: dict[str, float] | None = None) -> None:
    """A finished Decision: its tier, and the milliseconds it spent per stage ({"ingest": 1.2, ...})."""
    DECISIONS.labels(bounded("tier", decision.tier), bounded("decision_type", decision_type)).inc()
    for stage, ms in (stage_latencies_ms or {}).items():
        STAGE_LATENCY.labels(bounded("stage", stage)).observe(ms / 1000)


def observe_cache(level: str, hit: bool) -> None:
    """One cache look-up: level l1 | l2 | l3 | state."""
    CACHE.labels(bounded("cache_level", level), "hit" if hit else "miss").inc()


def observe_fallback(reason: str) -> None:
    FALLBACKS.labels(bounded("fallback_reason", reason)).inc()


def observe_breaker(breaker: str) -> None:
    BREAKERS.labels(bounded("breaker", breaker)).inc()


def observe_stream(client: str, question_type: str, first_chunk_ms: float, tokens_per_s: float, chunks: int) -> None:
    """One finished streamed answer."""
    client, qtype = bounded("client", client), bounded("question_type", question_type)
    STREAM_FIRST_CHUNK.labels(client, qtype).observe(first_chunk_ms / 1000)
    STREAM_RATE.labels(client, qtype).observe(tokens_per_s)
    STREAM_CHUNKS.labels(client).inc(chunks)


def set_consumer_lag(group: str, topic: str, lag: int) -> None:
    CONSUMER_LAG.labels(bounded("group", group), bounded("topic", topic)).set(lag)


def observe_verdicts(verdicts) -> None:
    """Shadow verdicts, counted per mechanism they name and once under 'all'."""
    for v in verdicts:
        result = "kept" if v.kept else "lost"
        SHADOW_VERDICTS.labels("all", result).inc()
        for mechanism in v.mechanisms:
            SHADOW_VERDICTS.labels(bounded("mechanism", mechanism), result).inc()


def set_agreement(mechanism: str, share: float) -> None:
    SHADOW_AGREEMENT.labels(bounded("mechanism", mechanism)).set(share)
