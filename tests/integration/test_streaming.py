"""Streamed answers end to end on the real local broker and the real ClickHouse engine: chunks in order on
jev.chunks.v1, one usage row per generated stream whose delivered tokens equal its chunks' (its output tokens are
what the generator generated, the decision's count), the bucket pacing each
response until the postprocess.throttle switch turns it off live, and cached answers streamed too."""

import argparse
import asyncio

import orjson
import pytest

from streams.core.switches import switch_record
from streams.runtime.control import publish
from workers.cli.commands.stream import follow, request
from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration


LONG_REFERENCE = "\n".join(
    f"Parcels to warehouse {h} leave within {h % 47 + 1} hours of payment and arrive in {h % 5 + 2} working days."
    for h in range(40)
)


def creative_mobile(payloads: list[bytes], tag: str) -> tuple[list[bytes], set[str]]:
    """The workload's streamed questions as 512-token creative answers to mobile clients, under new ids, their
    reference long enough for the extractive generator to write that much."""
    bodies = [
        {
            **(body := orjson.loads(p)),
            "request_id": f"{tag}-{i}",
            "question_type": "creative",
            "client": "mobile",
            "state": body["state"] + "\n" + LONG_REFERENCE,
        }
        for i, p in enumerate(payloads)
    ]
    return [orjson.dumps(b) for b in bodies], {b["request_id"] for b in bodies}


async def test_streams_are_ordered_metered_paced_and_switchable(settings, clickhouse_dsn, usage_db):
    payloads = workload.generate(6, seed=9, repeat_share=0.0, stream_share=1.0)
    ids = {orjson.loads(p)["request_id"] for p in payloads}
    repeats = [orjson.dumps({**orjson.loads(p), "request_id": f"again-{i}"}) for i, p in enumerate(payloads[:2])]
    paced, paced_ids = creative_mobile(workload.generate(2, seed=10, repeat_share=0.0, stream_share=1.0), "paced")
    unpaced, unpaced_ids = creative_mobile(workload.generate(2, seed=11, repeat_share=0.0, stream_share=1.0), "unpaced")
    settings = settings.replace(backend="lexical", clickhouse_dsn=clickhouse_dsn)
    async with Pipeline(settings, known_decision_types()) as pipe:
        await pipe.publish(payloads)
        await pipe.collect(len(ids), 0, timeout=120)
        await pipe.publish(repeats + paced)  # the repeats are answered from the L1 cache
        await pipe.collect(len(ids) + 4, 0, timeout=120)
        await publish(pipe.settings.bootstrap, [switch_record("postprocess.throttle", False)])
        await asyncio.sleep(1.5)  # the scoring worker's control reader polls every 200 ms
        await pipe.publish(unpaced)
        decisions, _ = await pipe.collect(len(ids) + 6, 0, timeout=120)
        every = ids | {"again-0", "again-1"} | paced_ids | unpaced_ids
        chunks = await pipe.read_chunks(every, timeout=30)
        await pipe.wait_usage_rows(at_least=3 * len(every))
        rows = {
            rid: (delivered, first, rate, out)
            for rid, delivered, first, rate, out in pipe.ch.query(
                "SELECT request_id, delivered_tokens, first_chunk_ms, tokens_per_s, output_tokens "
                "FROM usage_events FINAL "
                "WHERE stage = 'score' AND section = 'stream'"
            ).result_rows
        }
        per_request = dict(
            pipe.ch.query(
                "SELECT request_id, count() FROM usage_events FINAL WHERE stage = 'score' GROUP BY request_id"
            ).result_rows
        )
        shown = []  # `jev stream` against the running pipeline
        args = argparse.Namespace(
            question="How long does delivery to Lyon take?\nReference:\n"
            + "\n".join(f"Parcels to Lyon leave within {h} hours." for h in range(40)),
            question_type="",
            client="mobile",
            decision_type="customer_service",
            tenant="acme",
            max_output_tokens=512,
        )
        summary = await follow(pipe.settings, request(args), 60, lambda chunk, ms: shown.append((chunk, ms)))

    assert every <= decisions.keys()
    for rid in every:
        mine = chunks[rid]
        assert [c.seq for c in mine] == list(range(len(mine))) and mine[-1].final, rid
        assert "".join(c.text for c in mine) == decisions[rid].text, rid
    generated = ids | paced_ids | unpaced_ids
    assert {rid for rid, d in decisions.items() if d.tier == "llm"} == generated
    assert {decisions[f"again-{i}"].tier for i in range(2)} == {"cache_l1"}
    for rid in generated:
        assert per_request[rid] == 1  # one usage row per streamed answer, not one per chunk
        assert rows[rid][0] == sum(c.tokens for c in chunks[rid]), rid
        assert rows[rid][3] == decisions[rid].output_tokens > 0, rid
        assert rows[rid][1] > 0, rid
    for rid in paced_ids | unpaced_ids:
        assert len(chunks[rid]) >= 512 // 32 and all(c.tokens <= 32 for c in chunks[rid])
    # a mobile client's bucket: 256 tokens/s, holding one 32-token chunk
    assert all(rows[rid][2] <= 256 * 16 / 15 * 1.05 for rid in paced_ids)
    assert all(rows[rid][2] > 1000 for rid in unpaced_ids), [rows[rid][2] for rid in unpaced_ids]
    assert summary["chunks"] == len(shown) >= 128 // 32 and shown[-1][0].final
    assert summary["tokens"] == summary["output_tokens"] and summary["tier"] == "llm"
    assert 0 < summary["first_chunk_ms"] == shown[0][1] <= summary["total_ms"]
    assert [ms for _, ms in shown] == sorted(ms for _, ms in shown)
