"""vLLM's engine in-process in a scoring worker, on its CPU build: the worker runs in .venv-vllm (`make vllm`) with
JEV_BACKEND=vllm:<SmolLM2 directory>, so the fine tier is the design's batched worker. A session's decisions share
one state (the store's policy), in English and Chinese: each is decided by the fine tier through the real broker,
and the engine's prefix cache reads the shared state, which the usage rows in the embedded ClickHouse carry.
Skips naming `make vllm` where .venv-vllm or its Jev install is absent."""

import subprocess

import orjson
import pytest

from infra.model_server import VLLM_ENV, VLLM_INSTALL, VLLM_MODEL_DIR, VLLM_VENV, vllm_missing
from tests.integration.test_vllm_server import DECISIONS, POLICY
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = [pytest.mark.integration, pytest.mark.model_server]
PYTHON = VLLM_VENV / "bin" / "python"


def engine_missing() -> str:
    """Why a scoring worker cannot run vLLM in-process here, or ''."""
    if why := vllm_missing():
        return why
    found = subprocess.run([str(PYTHON), "-c", "import faust, vllm"], capture_output=True, timeout=300)
    return "" if found.returncode == 0 else f"Jev's dependencies are not installed in {VLLM_VENV}: {VLLM_INSTALL}"


def payloads() -> list[bytes]:
    """Each decision of DECISIONS as a request of one session: the policy first (the shared state), the question
    after it."""
    return [
        orjson.dumps(
            {
                "request_id": f"engine-{lang}-{i}",
                "tenant": "acme",
                "service": "support",
                "session_id": "engine-session",
                "decision_type": "ranking",
                "state": POLICY + question,
                "candidates": [{"id": f"c{j}", "text": t} for j, t in enumerate(candidates)],
            }
        )
        for lang in ("en", "zh")
        for i, (question, candidates) in enumerate(DECISIONS[lang])
    ]


async def test_the_scoring_worker_decides_with_vllms_engine_and_its_prefix_cache(settings, clickhouse_dsn, usage_db):
    if why := engine_missing():
        pytest.skip(why)
    sent = payloads()
    settings = settings.replace(backend=f"vllm:{VLLM_MODEL_DIR}", clickhouse_dsn=clickhouse_dsn)
    async with Pipeline(settings, known_decision_types(), scorer_python=str(PYTHON), scorer_env=VLLM_ENV) as pipe:
        await pipe.publish(sent)
        decisions, rejections = await pipe.collect(len(sent), 0, timeout=600)
        await pipe.wait_usage_rows(at_least=3 * len(sent))
        rows = pipe.ch.query(
            "SELECT request_id, sum(input_tokens), sum(cache_read_tokens) FROM usage_events FINAL "
            "WHERE model = {model:String} GROUP BY request_id",
            parameters={"model": str(VLLM_MODEL_DIR)},  # the engine's model: its directory
        ).result_rows
    assert not rejections, rejections
    assert len(decisions) == len(sent)
    assert all(d.tier == "fine" and d.action_id for d in decisions.values()), decisions
    scored = {request_id: (prompt, cached) for request_id, prompt, cached in rows}
    assert set(scored) == set(decisions), rows  # every decision's candidates went through the engine
    assert all(prompt > cached >= 0 for prompt, cached in scored.values()), rows
    assert sum(cached for _, cached in scored.values()) > 0, rows  # the shared state read from the prefix cache
