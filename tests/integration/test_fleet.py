"""Several stage processes on the real broker and ClickHouse engine: one hard budget holds across them."""

import asyncio
import json
import time

import pytest

from schemas.records import Control
from streams.runtime.control import publish
from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration

HARD = 8_000


def answered(decisions: dict, rejections: list) -> set[str]:
    """The request ids that got a decision or a refusal."""
    return set(decisions) | {r.request_id for r in rejections}


async def test_a_hard_budget_holds_across_two_stage_processes(settings):
    payloads = workload.generate(120, seed=17, repeat_share=0.0)
    async with Pipeline(
        settings.replace(clickhouse_dsn=""), known_decision_types(), stages_process=True, stages=2, scorers=1
    ) as pipe:
        await publish(
            pipe.settings.bootstrap,
            [Control(kind="budget", key="tenant:acme", value={"hard_tokens": HARD}, ts=time.time())],
        )
        await asyncio.sleep(2.0)  # every stage process has read the budget
        await pipe.publish(payloads)
        decisions, rejections = await pipe.collect(0, 0, timeout=10)
        deadline = time.monotonic() + 240
        while len(answered(decisions, rejections)) < len(payloads) and time.monotonic() < deadline:
            more, rejections = await pipe.collect(len(payloads), 0, timeout=5)
            decisions.update(more)
    over = [r for r in rejections if r.reason == "over_budget"]
    # a refusal is not remembered (the request may be sent again once the budget allows), so a partition moved
    # between the two processes mid-run refuses its uncommitted requests twice: each request is counted once
    assert answered(decisions, rejections) == {json.loads(p)["request_id"] for p in payloads}
    assert over, "the budget is small enough that some requests are refused"
    spent = sum(d.input_tokens + d.output_tokens for d in decisions.values())
    assert 0 < spent <= HARD
