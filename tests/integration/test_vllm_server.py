"""The pipeline against the real vLLM server (its CPU build from `make vllm`, SmolLM2-135M-Instruct, prefix caching
and cached-token details on: the `vllm_server` fixture): decisions scored by the LLM tier in one call each, a
streamed generate answer, both counts reconciled in the real embedded ClickHouse with the tokens the server's
prefix cache served, the server killed mid-run (fallback with a reason, nothing lost, recovery), and `jev demo`
on it. English and Chinese. Skips naming `make vllm` where .venv-vllm is absent."""

import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schemas.records import Candidate, Request, Work
from streams.models import http, registry
from streams.models import pool as pool_mod
from streams.models.lexical import LexicalBackend
from streams.runtime.usage_sink import UsageSink
from streams.scoring import policy
from streams.scoring.engine import Engine
from streams.scoring.factory import work_for
from tests.integration.streamed_answer import streamed_answer
from workers.analytics.levels import by_model
from workers.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.model_server]
ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2-vllm"  # the pool entry (streams/models/models.yaml) and the name the server serves
POLICY = (
    "The store's policy: a broken item is refunded in full within 30 days; a late parcel gets its tracking link "
    "and a new delivery date; a wrong size is exchanged for free. 商店政策：破损商品30天内全额退款；"
    "迟到的包裹提供物流链接和新的送达日期；尺码不对可以免费换货。\n"
)
DECISIONS = {
    "en": [
        (
            "Customer: the mug arrived broken and I want my money back.",
            ["Offer a discount on the next order", "Issue a refund for the broken mug", "Close the ticket"],
        ),
        (
            "Customer: where is my parcel? It is three days late.",
            ["Share the tracking link and the new delivery date", "Issue a refund", "Ask for a product review"],
        ),
    ],
    "zh": [
        ("顾客：杯子到货时已经碎了，我要退款。", ["给下次订单打折", "为破损的杯子退款", "关闭工单"]),
        ("顾客：我的包裹晚了三天，现在在哪里？", ["提供物流链接和新的送达日期", "退款", "请顾客写评价"]),
    ],
}


def served(server, **options):
    """The pool's smollm2-vllm entry on the fixture's port (Jev counts in SmolLM2's own vocabulary)."""
    pool = pool_mod.load()
    entry = dataclasses.replace(
        pool[MODEL],
        base_url=server.url,
        options={**pool[MODEL].options, "breaker_failures": 3, "breaker_cooldown_s": 1.0, **options},
    )
    return registry.scorer(MODEL, pool.with_model(entry))


def llm_engine(escalation) -> Engine:
    """Every decision escalated to the LLM tier (escalate_below above any confidence), a slow CPU's time budget."""
    config = policy.load().with_timeout(120_000)
    config = policy.Config(
        config.tiers,
        {name: dataclasses.replace(p, escalate_below=1.01) for name, p in config.policies.items()},
        dataclasses.replace(config.default, escalate_below=1.01),
    )
    return Engine(coarse=LexicalBackend(), fine=LexicalBackend(), escalation=escalation, config=config)


def works(tag: str, lang: str) -> list[Work]:
    return [
        work_for(
            Request(
                request_id=f"{tag}-{lang}-{i}",
                tenant="acme",
                service="support",
                decision_type="ranking",
                state=POLICY + context,
                candidates=[Candidate(id=f"c{j}", text=t) for j, t in enumerate(cands)],
            ),
            "gpt-4o-mini",
        )
        for i, (context, cands) in enumerate(DECISIONS[lang])
    ]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_decisions_go_to_the_llm_tier_in_one_call_each_reconciled_with_cached_tokens(
    vllm_server, usage_db, clickhouse_dsn, monkeypatch, capsys, lang
):
    """A session's decisions in order, then again, then as one micro-batch (its calls concurrent): the policy first,
    so the server's prefix cache serves it to the next decision and the whole prompt to its repeat. Jev's claim of
    those cache reads and the server's cached_tokens are both stored, reconciled per model within 5% and shown by
    `jev report`."""
    model = served(vllm_server)
    eng = llm_engine(model)
    srv = http.server(model.base_url, model.options)
    before = srv.calls
    results = [r for tag in ("a", "b") for w in works(tag, lang) for r in eng.decide_batch([w])]
    results += eng.decide_batch(works("c", lang))
    assert srv.calls - before == len(results) == 3 * len(DECISIONS[lang])  # one call per decision
    assert all(d.tier == "llm" and d.action_id and f"escalation:{MODEL}" in d.chain for d, _ in results)
    events = [e for _, evs in results for e in evs]
    served_rows = [e for e in events if e.model == MODEL]
    assert served_rows and all(e.count_source == "server" for e in served_rows)
    assert (
        sum(e.cache_read_tokens for e in served_rows) > 0 and sum(e.server_cache_read_tokens for e in served_rows) > 0
    )
    UsageSink(usage_db).insert(events)
    monkeypatch.setenv("JEV_CLICKHOUSE_DSN", clickhouse_dsn)
    assert main(["report", "--json", "--since", "24h"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["by_model"][MODEL]
    assert row == by_model(usage_db, datetime.datetime(2020, 1, 1))[MODEL]
    assert row["calls"] == len(results) and row["tokens_server"] > 0 and abs(row["drift"]) <= 0.05, row
    assert row["cached_claimed"] > 0 and row["cached_confirmed"] > 0 and row["cached_tokens"] > 0, row
    assert abs(row["cached_drift"]) <= 0.05, row


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_streamed_generate_answer_is_metered_on_both_counts(vllm_server, lang):
    row = streamed_answer(served(vllm_server), lang, max_output_tokens=32)
    # vLLM's final usage chunk: the prompt Jev counted before the call (SmolLM2's vocabulary and chat template)
    # within 5% of the server's
    assert abs(row.input_tokens / row.server_input_tokens - 1) <= 0.05


def test_the_server_killed_mid_run_falls_back_with_a_reason_and_recovers(vllm_server):
    eng = llm_engine(served(vllm_server, retries=1))
    assert all(d.tier == "llm" for d, _ in eng.decide_batch(works("up", "en")))
    vllm_server.kill()
    down = eng.decide_batch(works("down", "en") + works("down", "zh"))
    expected = [w.request.request_id for w in works("down", "en") + works("down", "zh")]
    assert [d.request_id for d, _ in down] == expected  # nothing lost
    # the LLM tier failed: each decision keeps the fine tier's answer and names why it did not escalate
    assert all(d.action_id and d.tier != "llm" for d, _ in down)
    assert all(any("model_unavailable" in step for step in d.chain) for d, _ in down), [d.chain for d, _ in down]
    vllm_server.start()
    for _ in range(5):  # after each cool-down one trial call at a time, the others failing fast until it closes
        time.sleep(1.2)
        trial = eng.decide_batch(works("trial", "zh"))
        if any(d.tier == "llm" for d, _ in trial):
            break
    assert any(d.tier == "llm" for d, _ in trial)
    assert all(d.tier == "llm" for d, _ in eng.decide_batch(works("back", "zh")))


def test_the_demo_on_vllm_decides_with_the_llm_tier_and_reports_the_servers_cache(vllm_server, tmp_path):
    env = {
        **os.environ,
        "JEV_DATA_DIR": str(tmp_path / "jev"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])),
    }
    run = subprocess.run(
        [sys.executable, "-m", "workers.cli.main", "demo", "--model-url", vllm_server.url, "--escalate"]
        + ["--model-concurrency", "4", "--requests", "24", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["decided"] == report["requests"] == 24 and report["tiers"].get("llm", 0) > 0
    assert report["generator"] == MODEL
    row = report["by_model"][MODEL]
    assert row["calls"] > 0 and row["tokens_server"] > 0 and row["cached_tokens"] > 0
    assert row["drift"] is not None and abs(row["drift"]) <= 0.05, row
