"""`jev demo`: the whole pipeline on the embedded default, driven by the bundled workload.

Starts the local pipeline (workers/harness/pipeline.py), publishes the workload in waves, waits until every request
has a decision (and every bad input a dead letter), reports, and stops everything it started.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path

import orjson
import yaml

from streams.shadow.sample import Sampler, bucket
from streams.text import language
from workers.analytics.agreement import agreement, shadow_work
from workers.analytics.levels import by_model
from workers.analytics.scrape import gpu_present, merge_scrapes, missing_or_still, referenced_series, totals
from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types, percentile

WAVES = 4  # the workload arrives in waves, so later repeats can be answered from the cache
USAGE_PER_DECISION = 3  # ingest, score or cache, postprocess
STREAM_SHARE = 0.1  # of the new requests: customer-service questions answered by generation, streamed
DEADLINE_SHARE = 0.2  # of the new payment screenings: made at checkout, with the caller's deadline
CHINESE_SHARE = 0.1  # of the new decisions: Chinese customer-service tickets (by_language reports them)
ANSWER_WAIT_S = 600.0  # the most one request waits for its answer (a one-slot CPU model server answers in turn)
SHADOW_WAIT_S = 120.0  # the most the demo waits for the sample's verdicts after the last decision
SERVED_ESCALATE_BELOW = 0.5  # --escalate: fine-tier confidence under which the served model re-ranks (tier llm)
SERVED_TIMEOUT_MS = 20_000  # --escalate: each decision type's time budget (a CPU server takes seconds per call)
SERVED_ANSWER_TOKENS = 64  # --model-url: the most tokens one streamed answer generates (the question types' lengths
# cut to it): about a second of SmolLM2-135M on llama.cpp on 2 quiet cores, two or three sentences


def served_settings(settings, url: str, concurrency: int = 1, escalate: bool = False):
    """Settings that send the demo's generate requests (tier `llm`) to the OpenAI-compatible server at `url`, and
    with `escalate` also the decisions the fine tier is unsure of (escalation tier `llm`, each type's time budget
    SERVED_TIMEOUT_MS): a model pool with the server's model beside the bundled ones (a pool entry of that name
    keeps its tokenizer and prices; `concurrency` calls at once, see streams/models/http.py), the bundled
    decision types, and the bundled stream lengths cut to SERVED_ANSWER_TOKENS, written under the data dir.
    Escalation is off by default: the bundled SmolLM2-135M picks the right candidate of a 20-way decision far
    less often than the fine tier (it answers by letter position), and on a one-at-a-time CPU server decisions
    would wait behind streamed answers. Raises ValueError when nothing answers at `url`."""
    from importlib import resources

    import httpx

    try:
        listed = httpx.get(url.rstrip("/") + "/models", timeout=10.0).json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ValueError(
            f"no OpenAI-compatible server answers at {url} ({type(exc).__name__}); give its base URL, "
            "e.g. http://127.0.0.1:8000/v1"
        ) from None
    name = str(listed)
    folder = Path(settings.data_dir).resolve() / "model-url"
    folder.mkdir(parents=True, exist_ok=True)
    pool = yaml.safe_load(resources.files("streams.models").joinpath("models.yaml").read_text())
    entry = pool["models"].get(name) or {}
    pool["models"][name] = {
        **entry,
        "engine": "openai",
        "model": name,
        "base_url": url,
        "channel": "precise",
        "options": {**(entry.get("options") or {}), "timeout_s": 60, "max_concurrency": concurrency},
    }
    types = yaml.safe_load(resources.files("streams.scoring").joinpath("decision_types.yaml").read_text())
    if escalate:
        types["tiers"]["escalation"] = name
        types["defaults"].update(escalate_below=SERVED_ESCALATE_BELOW, timeout_ms=SERVED_TIMEOUT_MS)
        for policy in types["types"].values():
            policy.pop("timeout_ms", None)
    lengths = yaml.safe_load(resources.files("streams.output").joinpath("stream.yaml").read_text())
    for spec in lengths["types"].values():
        spec["max_output_tokens"] = min(spec["max_output_tokens"], SERVED_ANSWER_TOKENS)
    (folder / "models.yaml").write_text(yaml.safe_dump(pool, allow_unicode=True))
    (folder / "decision_types.yaml").write_text(yaml.safe_dump(types, allow_unicode=True))
    (folder / "stream.yaml").write_text(yaml.safe_dump(lengths, allow_unicode=True))
    return settings.replace(
        models=str(folder / "models.yaml"),
        decision_types=str(folder / "decision_types.yaml"),
        stream_config=str(folder / "stream.yaml"),
        generator=name,
    )


def sampled(payloads: list[bytes], rate: str) -> int:
    """How many of the workload's requests the shadow sampler picks (a stable hash of the request id)."""
    sampler = Sampler(rate)
    return sum(
        1 for body in map(orjson.loads, payloads) if bucket(body["request_id"]) < sampler.rate(body["decision_type"])
    )


async def wait_verdicts(pipe: Pipeline, expected: int, since: dt.datetime, timeout: float) -> None:
    """Until every sampled request has a verdict in ClickHouse, or its twin was dropped or skipped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        verdicts = int(pipe.ch.query("SELECT count() FROM shadow_verdicts FINAL").result_rows[0][0])
        work = shadow_work(pipe.ch, since)
        if verdicts + work["dropped"] + work["skipped"] >= expected:
            return
        await asyncio.sleep(0.5)


async def run_demo(
    settings, n: int, progress, stages: int = 1, scorers: int = 1, metrics_out: str = "", reword_share: float = 0.0
) -> dict:
    """`stages`, `scorers`: stage processes and scoring workers. `metrics_out`: write the final /metrics scrape of
    every process the demo ran there (Prometheus text, each sample labelled with its process) and report which
    series the alerts and dashboard read it lacks. `reword_share`: of the product searches, asked in
    other words (workload.py)."""
    payloads = workload.generate(
        n,
        stream_share=STREAM_SHARE,
        deadline_share=DEADLINE_SHARE,
        chinese_share=CHINESE_SHARE,
        reword_share=reword_share,
    )
    streamed = {r["request_id"] for r in map(orjson.loads, payloads) if r.get("stream")}
    bad = workload.BAD_INPUTS
    started = time.monotonic()
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    expected = sampled(payloads, settings.shadow_rate)
    metrics = {}
    async with Pipeline(
        settings,
        known_decision_types(settings.decision_types),
        stages=stages,
        scorers=scorers,
        metrics=bool(metrics_out),
    ) as pipe:
        task = progress.add_task("decisions", total=n + len(bad))
        await pipe.publish(bad)  # malformed on purpose: raw bytes no client would send
        decisions, told, chunks = {}, [], {}
        for wave in range(WAVES):
            first = wave * n // WAVES
            got, refused, streams = await pipe.ask(  # as a service asks: the client library, one per tenant
                payloads[first : (wave + 1) * n // WAVES],
                timeout=ANSWER_WAIT_S,
                on_progress=lambda done, first=first: progress.update(task, completed=first + done),
            )
            decisions.update(got)
            told += refused
            chunks.update(streams)
        # every rejection, the malformed inputs' too, from the operators' all-tenant topic
        _, rejections = await pipe.collect(0, len(bad) + len(told), timeout=max(60.0, n / 20))
        chunks = {rid: chunks[rid] for rid in streamed & decisions.keys() if rid in chunks}
        await wait_verdicts(pipe, expected, since, SHADOW_WAIT_S)
        rows = await pipe.wait_usage_rows(at_least=USAGE_PER_DECISION * len(decisions))
        stream = stream_report(pipe.ch, chunks)
        actual, nominal = pipe.ch.query(
            "SELECT sum(input_tokens + output_tokens), sum(nominal_tokens) FROM usage_events FINAL "
            "WHERE stage != 'shadow'"
        ).result_rows[0]
        agreed = agreement(pipe.ch, since, settings.shadow_floors)
        shadow = {
            "rate": settings.shadow_rate,
            "sampled": expected,
            "verdicts": agreed["overall"]["verdicts"],
            **shadow_work(pipe.ch, since),
        }
        cache = {
            level: {"hits": int(hits), "tokens_saved": int(saved)}
            for level, hits, saved in pipe.ch.query(
                "SELECT section, count(), sum(nominal_tokens) FROM usage_events FINAL WHERE stage = 'cache' "
                "GROUP BY section ORDER BY section"
            ).result_rows
        }
        cache["l3_prefetch_tokens"] = int(
            pipe.ch.query(
                "SELECT sum(input_tokens + output_tokens) FROM usage_events FINAL "
                "WHERE position(request_id, '~l3~') > 0"
            ).result_rows[0][0]
        )
        models = by_model(pipe.ch, since)
        if metrics_out:
            metrics = write_scrapes(pipe.scrape_metrics(), metrics_out)
    tiers: dict[str, int] = {}
    fallbacks: dict[str, int] = {"model_unavailable": 0}  # why each fell back: its chain's first step's reason
    for d in decisions.values():
        tiers[d.tier] = tiers.get(d.tier, 0) + 1
        if d.tier == "fallback" and d.chain:
            reason = d.chain[0].split(":")[1] if d.chain[0].startswith("fallback:") else d.chain[0]
            fallbacks[reason] = fallbacks.get(reason, 0) + 1
    cache["l2_first_hit_at"] = first_decided_by(payloads, decisions, "cache_l2")
    return {
        "requests": n,
        "decided": len(decisions),
        "rejected": len(rejections),
        "rejected_reasons": sorted({r.reason for r in rejections}),
        "tiers": dict(sorted(tiers.items())),
        "fallbacks": dict(sorted(fallbacks.items())),
        "tokens": {"actual": int(actual), "nominal": int(nominal)},
        "by_model": models,
        "cache": cache,
        "agreement": agreed,
        "shadow": shadow,
        "latency": latency_split(decisions.values()),
        "clickhouse_rows": rows,
        "stages": stages,
        "scorers": scorers,
        "generator": settings.generator,
        **metrics,
        "wall_s": round(time.monotonic() - started, 1),
        "stream": stream,
        "by_language": by_language(payloads, decisions),
    }


def by_language(payloads: list[bytes], decisions: dict) -> dict:
    """Per request language (streams.text.language.detect on the state and candidates): requests, decided, the tiers
    that decided them and the fine-tier models that ranked them (from each decision's chain)."""
    out: dict[str, dict] = {}
    for raw in payloads:
        body = orjson.loads(raw)
        state = body.get("state")
        words = state if isinstance(state, str) else " ".join(str(v) for v in (state or {}).values())
        lang = language.detect(words + " " + " ".join(c.get("text", "") for c in body.get("candidates", [])))
        row = out.setdefault(lang, {"requests": 0, "decided": 0, "tiers": {}, "fine_models": {}})
        row["requests"] += 1
        decision = decisions.get(body["request_id"])
        if decision is None:
            continue
        row["decided"] += 1
        row["tiers"][decision.tier] = row["tiers"].get(decision.tier, 0) + 1
        for step in decision.chain:
            if step.startswith("fine:"):
                model = step.split(":")[1]
                row["fine_models"][model] = row["fine_models"].get(model, 0) + 1
    return dict(sorted(out.items()))


def first_decided_by(payloads: list[bytes], decisions: dict, tier: str) -> int | None:
    """How many requests the workload had published up to the first one `tier` decided (1-based; None for none):
    for L2, how much traffic its error bound took to certify before it served."""
    return next(
        (
            i + 1
            for i, raw in enumerate(payloads)
            if getattr(decisions.get(orjson.loads(raw)["request_id"]), "tier", None) == tier
        ),
        None,
    )


def latency_split(decisions) -> dict:
    """Percentiles of each decision's time from admission: queue_ms (until the work that decided it started:
    waiting behind the bursts before it), service_ms (the rest, until postprocess), total_ms (both)."""
    parts = {
        "queue_ms": [d.queue_ms for d in decisions],
        "service_ms": [max(0.0, d.latency_ms - d.queue_ms) for d in decisions],
        "total_ms": [d.latency_ms for d in decisions],
    }
    return {
        key: {f"p{round(q * 100)}": percentile(values, q) for q in (0.5, 0.95, 0.99)} for key, values in parts.items()
    }


def stream_report(ch, chunks: dict[str, list]) -> dict:
    """Streamed answers: chunks and tokens as a client read them, time to first chunk and tokens/s from their
    usage rows (generated streams; a cached answer goes out as chunks at once and has none), whether every
    stream arrived in order, whether the usage rows' delivered tokens equal the tokens of the chunks the client
    read (`usage_delivered_equal_chunks`), and the output tokens the generated streams cost, in the generator's
    tokenizer (`generated_tokens`: delivered ones and those cleaned, cut or withheld)."""
    rows = {
        rid: (int(out), float(first), float(rate), int(delivered))
        for rid, out, first, rate, delivered in ch.query(
            "SELECT request_id, output_tokens, first_chunk_ms, tokens_per_s, delivered_tokens FROM usage_events FINAL "
            "WHERE stage = 'score' AND section = 'stream'"
        ).result_rows
    }
    generated = [rid for rid in chunks if rid in rows]
    return {
        "requests": len(chunks),
        "generated": len(generated),
        "chunks": sum(map(len, chunks.values())),
        "tokens": sum(c.tokens for cs in chunks.values() for c in cs),
        "generated_tokens": sum(rows[rid][0] for rid in generated),
        "ordered": all([c.seq for c in cs] == list(range(len(cs))) and cs and cs[-1].final for cs in chunks.values()),
        "usage_delivered_equal_chunks": all(rows[rid][3] == sum(c.tokens for c in chunks[rid]) for rid in generated),
        "first_chunk_ms_p50": percentile([rows[rid][1] for rid in generated], 0.5),
        "first_chunk_ms_p95": percentile([rows[rid][1] for rid in generated], 0.95),
        "tokens_per_s_p50": percentile([rows[rid][2] for rid in generated], 0.5),
    }


def write_scrapes(scraped: dict[str, str], path: str) -> dict:
    """Write every process's scrape to `path` as one exposition (label `process` says whose); {"metrics":
    {processes, referenced, series, not_moved}} for the report: `series` sums each series the alert rules and
    dashboard read over every process and label set."""
    Path(path).write_text(merge_scrapes(scraped))
    wanted = referenced_series(gpu=gpu_present(), broker_loss=False)
    summed = totals(list(scraped.values()))
    return {
        "metrics": {
            "file": path,
            "processes": sorted(scraped),
            "referenced": len(wanted),
            "series": {name: round(summed.get(name, 0.0), 9) for name in sorted(wanted)},
            "not_moved": missing_or_still(list(scraped.values()), wanted),
        }
    }
