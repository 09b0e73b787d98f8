"""Prometheus metrics, declared once. Label values come from small fixed sets (stage, tier, cache level,
token kind) or from configured names (decision type), capped at MAX_LABEL_VALUES distinct values per label
with the rest counted as "other": per-user and per-request detail belongs in ClickHouse, not here.

Workers call start_metrics_server(settings) once, then the observe_* helpers.
"""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

from streams.security import secret_files
from streams.security.signing import SIGNED
from streams.usage.drift import claims_cache, drift

MAX_LABEL_VALUES = 50
WASTE_SECTIONS = ("retry", "cleanup")  # postprocess sections: tokens spent repairing output, not deciding (TE)
TOKEN_KINDS = ("input", "cache_read", "output", "nominal")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

TOKENS = Counter(
    "jev_tokens", "Tokens metered into ClickHouse (after dedup), by stage and kind.", ["stage", "kind", "decision_type"]
)
EFFECTIVE_TOKENS = Counter(
    "jev_tokens_effective",
    "Input and output tokens metered (after dedup) that served a "
    "decision: not spent on one that fell back, nor on repairing output, nor in shadow. "
    'Token efficiency TE = these / jev_tokens_total{kind=~"input|output",stage!="shadow"}.',
    ["decision_type"],
)
MODEL_TOKENS = Counter(
    "jev_model_tokens",
    "Input and output tokens of model calls metered, by model and count: jev "
    "(Jev's own count, which reserved the budget) and billed (the server's count where the server "
    "reported one, else Jev's: what settled it).",
    ["model", "count"],
)
COUNT_DRIFT = Gauge(
    "jev_token_count_drift",
    "Billed over Jev's count of a model's tokens, minus 1, since this "
    "process started (+0.05: the server counted 5% more). The alert JevTokenCountDrift reads "
    "jev_model_tokens_total over 15 minutes.",
    ["model"],
)
CACHE_READS = Counter(
    "jev_model_cache_read_tokens",
    "Prompt tokens of a model's decide calls the server reported usage on that its prefix cache served, by "
    "count: claimed (Jev's count: its shared_context and state_cache savings) and confirmed (the server's "
    "cached_tokens). The alert JevCacheReadDrift reads them over 15 minutes.",
    ["model", "count"],
)
CACHE_READ_DRIFT = Gauge(
    "jev_cache_read_drift",
    "Confirmed over claimed cache reads of a model (jev_model_cache_read_tokens), minus 1, since this process "
    "started (-0.05: the server's prefix cache served 5% fewer prompt tokens than Jev claimed it would).",
    ["model"],
)
COST = Counter("jev_cost_usd", "Cost metered into ClickHouse, in USD.", ["stage", "decision_type"])
DECISIONS = Counter("jev_decisions", "Decisions made, by the tier that answered.", ["tier", "decision_type"])
CACHE = Counter("jev_cache_lookups", "Cache look-ups by level and result.", ["level", "result"])
PROMOTIONS = Counter(
    "jev_cache_promotions",
    "L2 near-misses judged against their candidate's cached answer (the "
    "naive twin, shadow work), by outcome: promoted (a key of that answer now), different, gone "
    "(the answer was evicted meanwhile).",
    ["outcome"],
)
PROMOTED_HITS = Counter(
    "jev_cache_promoted_hits",
    "L2 hits served through a promoted key (an alias of a judged near-miss; also counted in jev_cache_lookups).",
)
STAGE_LATENCY = Histogram(
    "jev_stage_latency_seconds",
    "Seconds from a request's arrival (admission) until each stage was done with it.",
    ["stage"],
    buckets=LATENCY_BUCKETS,
)
FALLBACKS = Counter("jev_fallbacks", "Decisions that fell back to rules, by reason.", ["reason"])
BREAKERS = Counter("jev_breaker_trips", "Circuit breakers tripped, by breaker.", ["breaker"])
CONSUMER_LAG = Gauge(
    "jev_consumer_lag_messages", "Messages behind the end of the topic, per consumer group.", ["group", "topic"]
)
PROTOCOL_BYTES = Counter(
    "jev_protocol_bytes",
    "Bytes of admitted requests' prompts: as rendered for the model "
    "(sent) and in a compact encoding (compact); their ratio is protocol expansion (PE).",
    ["encoding"],
)
GPU_MEMORY = Gauge(
    "jev_gpu_memory_utilization",
    "Share of the GPU's memory in use, per scoring worker on a GPU backend (MU).",
    ["device"],
)
SWITCH_ON = Gauge(
    "jev_switch_on", "1 while a kill switch is on, 0 while an operator has it off (per process).", ["switch"]
)
SINK_ROWS = Counter("jev_usage_rows", "Usage rows the sink handled: inserted, or dropped as redelivered.", ["result"])
SINK_SECONDS = Histogram(
    "jev_usage_insert_seconds", "Time of one usage-sink insert (dedup look-up included).", buckets=LATENCY_BUCKETS
)
STREAM_FIRST_CHUNK = Histogram(
    "jev_stream_first_chunk_seconds",
    "Streamed answers: admission to the first chunk.",
    ["client", "question_type"],
    buckets=LATENCY_BUCKETS,
)
STREAM_RATE = Histogram(
    "jev_stream_tokens_per_second",
    "Streamed answers: output tokens per second streamed.",
    ["client", "question_type"],
    buckets=(8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
)
STREAM_CHUNKS = Counter("jev_stream_chunks", "Chunks of streamed answers released.", ["client"])
SHADOW_VERDICTS = Counter(
    "jev_shadow_verdicts",
    "Shadow verdicts by saving mechanism ('all': every verdict) and "
    "result (kept: agreed with the naive path, or no less accurate where labelled).",
    ["mechanism", "result"],
)
SHADOW_AGREEMENT = Gauge(
    "jev_shadow_agreement",
    "Share of shadow verdicts each saving mechanism kept, over the "
    "guard's current window ('all': every verdict this process judged).",
    ["mechanism"],
)
ENCODING_LOOKUPS = Counter(
    "jev_encoding_cache_lookups",
    "Texts the scoring backends looked up in the encoding "
    "cache (streams/core/encodings.py), by model and result (hit: no model input).",
    ["model", "result"],
)
ENCODING_HIT_RATIO = Gauge(
    "jev_encoding_cache_hit_ratio",
    "Share of encoding-cache look-ups that were hits since the process started, by model.",
    ["model"],
)
ENCODING_EVICTIONS = Counter(
    "jev_encoding_cache_evictions",
    "Encodings evicted to keep the cache within JEV_ENCODING_CACHE_MB, by the model of the call that evicted them.",
    ["model"],
)
ENCODING_BYTES = Gauge("jev_encoding_cache_bytes", "Bytes the encoding cache holds (encodings and entry overhead).")

FORGED = Counter(
    "jev_forged_records",
    "Internal records refused because Jev did not write them: unsigned, badly "
    "signed, or a control record stamped in the future (streams/security/signing.py), by topic.",
    ["topic"],
)

REJECTED = Counter(
    "jev_rejected",
    "Requests, batch members and internal records dead-lettered to jev.rejected.v1, by reason (each reason's "
    "detail names the fix; streams/core/deadletter.py).",
    ["reason"],
)

OPEN_TENANCY = Gauge(
    "jev_open_tenancy",
    "1 while this process lets a producer speak for tenants it holds no key of (JEV_TENANT_KEYS empty): allows "
    "any_tenant (JEV_TENANTS=*) or named_tenants (a list); 0 once keys are set (streams/security/tenancy.py).",
    ["allows"],
)

LOG_RESTARTS = Counter(
    "jev_log_restarts",
    "Partitions whose log came back shorter than this process had read "
    "(a broker restarted without its data): read again from the beginning, by topic.",
    ["topic"],
)

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


# Series that alert rules read with rate()/increase(): present at 0 from a process's start, so a rule sees "none
# yet" rather than no series at all (JevUsageSinkStalled could not fire before the sink's first insert).
KNOWN_SERIES = (
    (SINK_ROWS, ("inserted",)),
    (SINK_ROWS, ("duplicate",)),
    (BREAKERS, ("token_cap",)),
    (BREAKERS, ("timeout",)),
    (BREAKERS, ("deadline",)),
    (FALLBACKS, ("token_cap",)),
    (FALLBACKS, ("timeout",)),
    (FALLBACKS, ("deadline",)),
    (FALLBACKS, ("budget",)),
    *((CACHE, (level, result)) for level in ("l1", "l2") for result in ("hit", "miss")),
    *((FORGED, (topic,)) for topic in sorted(SIGNED)),
)


def declare_known_series() -> None:
    for metric, labels in KNOWN_SERIES:
        metric.labels(*labels)


def bearer_token(settings) -> str:
    """The token /metrics requires: JEV_METRICS_TOKEN, else the one in JEV_METRICS_TOKEN_FILE (default
    <data_dir>/metrics.token), created when missing."""
    if settings.metrics_token:
        return settings.metrics_token
    path = Path(settings.metrics_token_file or Path(settings.data_dir).resolve() / "metrics.token")
    return secret_files.ensure(path, "JEV_METRICS_TOKEN_FILE").decode()


def start_metrics_server(settings) -> bool:
    """Serve /metrics on settings.metrics_host:settings.metrics_port (port 0 = off; loopback unless configured),
    answering only `Authorization: Bearer <bearer_token(settings)>`; True when started. The alerting series start
    at 0."""
    declare_known_series()
    if not settings.metrics_port:
        return False
    token = bearer_token(settings)
    import hmac
    import socketserver
    import threading
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from prometheus_client import make_wsgi_app

    exposition, expected = make_wsgi_app(REGISTRY), f"Bearer {token}".encode()

    def guarded(environ, start_response):
        given = environ.get("HTTP_AUTHORIZATION", "").encode()
        if not hmac.compare_digest(given, expected):
            start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")])
            return [b"send Authorization: Bearer <JEV_METRICS_TOKEN, or the token in JEV_METRICS_TOKEN_FILE>\n"]
        return exposition(environ, start_response)

    class Server(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args) -> None:
            return None

    server = make_server(settings.metrics_host, settings.metrics_port, guarded, Server, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, name="jev-metrics", daemon=True).start()
    return True


def effective(stage: str, stack: str, outcome: str) -> bool:
    """Whether an event's tokens served a decision (TE's numerator), as ClickHouse's indices_by_minute decides:
    not shadow work, not a decision that fell back, not a postprocess section that repaired output (the section
    is the stack's last frame when the one before it is the stage)."""
    if stage == "shadow" or outcome == "fallback":
        return False
    if stage != "postprocess":
        return True
    frames = stack.rsplit(";", 2)
    return not (len(frames) >= 2 and frames[-2] == stage and frames[-1] in WASTE_SECTIONS)


def observe_usage(events) -> None:
    """Tokens and cost of metered UsageEvents (the sink calls this for what it inserted), and each model's count
    against the billed count (observe_counts), summed per label set in one pass over the events first: one counter
    update per stage and decision type, and per model, not per event."""
    sums: dict[tuple[str, str], list[float]] = {}
    counts: dict[str, list[int]] = {}
    for e in events:
        f = e.__dict__
        stage, inputs, outputs = f["stage"], f["input_tokens"], f["output_tokens"]
        key = (stage, f["decision_type"])
        acc = sums.get(key) or sums.setdefault(key, [0, 0, 0, 0, 0.0, 0])
        acc[0] += inputs
        acc[1] += f["cache_read_tokens"]
        acc[2] += outputs
        acc[3] += f["nominal_tokens"]
        acc[4] += f["cost"]
        if effective(stage, f["stack"], f["outcome"]):
            acc[5] += inputs + outputs
        if f["model"] and (jev := inputs + outputs):
            billed = f["server_input_tokens"] + f["server_output_tokens"] if f["count_source"] != "jev" else jev
            by_model = counts.get(f["model"]) or counts.setdefault(f["model"], [0] * 6)
            by_model[0] += jev
            by_model[1] += billed
            if f["count_source"] == "server":
                by_model[2] += jev
                by_model[3] += billed
                if claims_cache(f["stack"], f["candidates"]):
                    by_model[4] += f["cache_read_tokens"]
                    by_model[5] += f["server_cache_read_tokens"]
    for (stage, dtype), acc in sums.items():
        stage, dtype = bounded("stage", stage), bounded("decision_type", dtype)
        for kind, n in zip(TOKEN_KINDS, acc):
            if n:
                TOKENS.labels(stage, kind, dtype).inc(n)
        if acc[4]:
            COST.labels(stage, dtype).inc(acc[4])
        if acc[5]:
            EFFECTIVE_TOKENS.labels(dtype).inc(acc[5])
    observe_counts(counts)


_reported: dict[tuple[str, str], list[int]] = {}  # (drift gauge, model) → [Jev's count, the server's] summed


def observe_counts(counts: dict[str, list[int]]) -> None:
    """Jev's count and the billed count of each model's tokens (the server's where it reported one, else Jev's), and
    two drifts over the calls the server did count (a call that reported no usage moves neither): of their tokens,
    and of their cache reads, claimed against confirmed (streams/usage/drift.py). model → [Jev's, billed, Jev's of
    reported, server's of reported, claimed cache reads of reported decide calls, confirmed], summed by
    observe_usage."""
    for model, (jev, billed, jev_reported, server_reported, claimed, confirmed) in counts.items():
        model = bounded("model", model)
        MODEL_TOKENS.labels(model, "jev").inc(jev)
        MODEL_TOKENS.labels(model, "billed").inc(billed)
        if jev_reported:
            observe_drift(COUNT_DRIFT, model, jev_reported, server_reported)
        if claimed or confirmed:
            CACHE_READS.labels(model, "claimed").inc(claimed)
            CACHE_READS.labels(model, "confirmed").inc(confirmed)
            observe_drift(CACHE_READ_DRIFT, model, claimed, confirmed)


def observe_drift(gauge: Gauge, model: str, jev: int, server: int) -> None:
    """Add one more batch's two counts to the totals behind a drift gauge and set it (unset while Jev's is 0)."""
    total = _reported.setdefault((gauge._name, model), [0, 0])
    total[0] += jev
    total[1] += server
    if (value := drift(total[0], total[1], 6)) is not None:
        gauge.labels(model).set(value)


def observe_sink(inserted: list, dropped: int, seconds: float) -> None:
    observe_usage(inserted)
    SINK_ROWS.labels("inserted").inc(len(inserted))
    if dropped:
        SINK_ROWS.labels("duplicate").inc(dropped)
    SINK_SECONDS.observe(seconds)


def observe_decision(decision, decision_type: str) -> None:
    """A finished Decision, by the tier that answered it (observe_stage times it)."""
    DECISIONS.labels(bounded("tier", decision.tier), bounded("decision_type", decision_type)).inc()


def observe_stage(stage: str, admitted_at: float, now: float | None = None) -> None:
    """A stage is done with a request admitted at `admitted_at` (epoch seconds): the time since its arrival."""
    STAGE_LATENCY.labels(bounded("stage", stage)).observe(max(0.0, (now or time.time()) - admitted_at))


def observe_stages(stage: str, works: list) -> None:
    """observe_stage for each Work of a micro-batch, one clock read and one label look-up."""
    if not works:
        return
    now, latency = time.time(), STAGE_LATENCY.labels(bounded("stage", stage))
    for work in works:
        latency.observe(max(0.0, now - work.admitted_at))


def observe_cache(level: str, hit: bool) -> None:
    """One look-up in cache level l1 | l2 | l3 | state, and whether it hit (a miss keeps the level it missed in)."""
    CACHE.labels(bounded("cache_level", level), "hit" if hit else "miss").inc()


def observe_promotion(outcome: str) -> None:
    PROMOTIONS.labels(bounded("promotion_outcome", outcome)).inc()


def observe_promoted_hit() -> None:
    PROMOTED_HITS.inc()


def observe_encoding_cache(model: str, hits: int, misses: int, evicted: int, hit_ratio: float, size: int) -> None:
    model = bounded("encoding_model", model)
    ENCODING_LOOKUPS.labels(model, "hit").inc(hits)
    ENCODING_LOOKUPS.labels(model, "miss").inc(misses)
    ENCODING_EVICTIONS.labels(model).inc(evicted)
    ENCODING_HIT_RATIO.labels(model).set(hit_ratio)
    ENCODING_BYTES.set(size)


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


def observe_protocol(sent_bytes: int, compact_bytes: int) -> None:
    PROTOCOL_BYTES.labels("sent").inc(sent_bytes)
    PROTOCOL_BYTES.labels("compact").inc(compact_bytes)


def set_gpu_memory(device: str, used_share: float) -> None:
    GPU_MEMORY.labels(bounded("device", device)).set(used_share)


def observe_rejected(reason: str) -> None:
    REJECTED.labels(reason).inc()


def observe_forged(topic: str) -> None:
    FORGED.labels(topic if topic in SIGNED else "other").inc()


def observe_switches(switches: dict[str, bool]) -> None:
    """Every kill switch's state as this process follows it from the control topic."""
    for switch, on in switches.items():
        SWITCH_ON.labels(switch).set(1 if on else 0)


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
