"""The demo's reports: requests by language, the latency split into queueing and service, how far into the
workload L2 first served, and the streamed answers (on the real embedded ClickHouse)."""

import orjson
import pytest

from infra.clickhouse import USAGE_COLUMNS
from schemas.records import Chunk, Decision, Request
from streams.runtime.usage_sink import to_columns
from streams.text import tokens
from streams.usage.events import usage_event
from workers.harness import workload
from workers.harness.demo import by_language, first_decided_by, latency_split, stream_report


def test_by_language_counts_requests_tiers_and_fine_models_per_language():
    payloads = workload.generate(120, seed=4, chinese_share=0.2)
    bodies = [orjson.loads(p) for p in payloads]
    chinese = [b["request_id"] for b in bodies if b["service"] == "support-zh"]
    decisions = {
        rid: Decision(request_id=rid, tier="fine", chain=["coarse:lexical:5/6", "fine:e5"]) for rid in chinese[:-1]
    }  # the last Chinese request is still undecided
    english = next(b["request_id"] for b in bodies if b["service"] != "support-zh")
    decisions[english] = Decision(request_id=english, tier="cache_l1")
    report = by_language(payloads, decisions)
    assert report["zh"] == {
        "requests": len(chinese),
        "decided": len(chinese) - 1,
        "tiers": {"fine": len(chinese) - 1},
        "fine_models": {"e5": len(chinese) - 1},
    }
    assert report["en"]["requests"] == len(bodies) - len(chinese) and report["en"]["tiers"] == {"cache_l1": 1}


def test_latency_splits_into_queue_and_service_per_decision():
    decisions = [Decision(request_id=f"r{i}", tier="fine", latency_ms=100.0 + i, queue_ms=float(i)) for i in range(100)]
    decisions.append(Decision(request_id="hit", tier="cache", latency_ms=3.0, queue_ms=0.0))
    split = latency_split(decisions)
    assert set(split) == {"queue_ms", "service_ms", "total_ms"}
    assert set(split["queue_ms"]) == {"p50", "p95", "p99"}
    assert split["queue_ms"]["p99"] == 98.0 and split["queue_ms"]["p50"] == 49.0
    assert split["service_ms"]["p50"] == 100.0 and split["service_ms"]["p99"] == 100.0
    assert split["total_ms"]["p99"] == 198.0


ANSWERS = {
    "en": ["Your parcel left the Lyon hub. ", "It arrives on Friday."],
    "zh": ["您的包裹已离开里昂中转站。", "预计周五送达。"],
}


def streamed(request_id: str, pieces: list[str], generated: int, delivered: int | None = None):
    """A generated stream as the demo reads it back: its chunks, and its usage row (`generated` output tokens in the
    generator's tokenizer, `delivered` those of its chunks: the chunks' own count unless given)."""
    chunks = [
        Chunk(
            request_id=request_id,
            seq=i,
            text=text,
            tokens=tokens.count(text, "gpt-4o-mini"),
            tokens_so_far=0,
            progress=0,
            final=i == len(pieces) - 1,
        )
        for i, text in enumerate(pieces)
    ]
    request = Request(
        request_id=request_id,
        tenant="acme",
        service="support",
        decision_type="customer_service",
        kind="generate",
        stream=True,
        state="?",
    )
    row = usage_event(
        request,
        "score",
        section="stream",
        model="smollm2-135m-instruct",
        output_tokens=generated,
        delivered_tokens=sum(c.tokens for c in chunks) if delivered is None else delivered,
        first_chunk_ms=250.0,
        tokens_per_s=40.0,
    )
    return chunks, row


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_stream_report_checks_the_usage_rows_against_the_chunks_the_client_read(usage_db, lang):
    kept, kept_row = streamed(f"{lang}-1", ANSWERS[lang], generated=64)
    cut, cut_row = streamed(f"{lang}-2", ANSWERS[lang][:1], generated=40)
    usage_db.insert("usage_events", to_columns([kept_row, cut_row]), column_names=USAGE_COLUMNS, column_oriented=True)
    report = stream_report(usage_db, {f"{lang}-1": kept, f"{lang}-2": cut})
    assert report["generated"] == 2 and report["generated_tokens"] == 104  # what the generator generated
    assert report["tokens"] == sum(c.tokens for c in kept + cut) < 104  # what the clients read
    assert report["usage_delivered_equal_chunks"] and report["ordered"]


def test_the_stream_report_says_when_a_usage_row_disagrees_with_the_chunks(usage_db):
    chunks, row = streamed("en-3", ANSWERS["en"], generated=64, delivered=3)
    usage_db.insert("usage_events", to_columns([row]), column_names=USAGE_COLUMNS, column_oriented=True)
    assert not stream_report(usage_db, {"en-3": chunks})["usage_delivered_equal_chunks"]


def test_first_decided_by_counts_the_workload_up_to_the_first_request_a_tier_decided():
    payloads = workload.generate(40, seed=3, reword_share=1.0, chinese_share=0.5)
    ids = [orjson.loads(p)["request_id"] for p in payloads]
    decisions = {rid: Decision(request_id=rid, tier="fine") for rid in ids}
    assert first_decided_by(payloads, decisions, "cache_l2") is None
    decisions[ids[30]] = Decision(request_id=ids[30], tier="cache_l2")
    decisions[ids[12]] = Decision(request_id=ids[12], tier="cache_l2")
    del decisions[ids[5]]  # an undecided request counts as published, not as a hit
    assert first_decided_by(payloads, decisions, "cache_l2") == 13
    assert first_decided_by(payloads, decisions, "fine") == 1
