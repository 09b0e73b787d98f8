"""`jev score --model smollm2-server` against the real model server (llama.cpp serving SmolLM2-135M-Instruct, the
`model_server` fixture) on labelled decisions built from the shared data, English (STS-B) and Chinese (zh-dev
dialogs): one call per decision, no fallbacks, and Jev's count (the GGUF's own vocabulary) within ±5% of the
server's, in `jev score`'s summary, in ClickHouse (`by_model`) and in `jev_token_count_drift`; a chat call's count
with the model's chat template equal to the server's."""

import dataclasses
import datetime
import json
import random
from pathlib import Path

import orjson
import pytest
from prometheus_client import REGISTRY

from schemas.records import Candidate, Request
from streams import settings as settings_mod
from streams.models import pool as pool_mod
from streams.models import registry
from streams.models.lexical import LexicalBackend
from streams.models.openai import choice_prompt
from streams.runtime.usage_sink import UsageSink
from streams.scoring import policy
from streams.scoring.engine import Engine
from streams.scoring.factory import work_for
from streams.text import tokens
from workers.analytics.levels import by_model
from workers.cli import main as cli

pytestmark = [pytest.mark.integration, pytest.mark.model_server]
DATA = Path(settings_mod.load().shared_data)
MODEL = "smollm2-server"
DECISIONS = 4  # per language: a CPU server on a shared machine takes seconds per call
CANDIDATES = 4


def english() -> list[dict]:
    """STS-B pairs scoring >= 4: the first sentence is the state, its pair the right candidate among others'."""
    path = DATA / "sts-b" / "dev.tsv"
    if not path.exists():
        pytest.skip(f"STS-B not found at {path} (set JEV_SHARED_DATA)")
    pairs = [
        (f[5], f[6])
        for f in (line.split("\t") for line in path.read_text(encoding="utf-8").splitlines())
        if len(f) >= 7 and float(f[4]) >= 4.0
    ]
    return labelled("en", pairs)


def chinese() -> list[dict]:
    """zh-dev dialogs: a user turn is the state, the assistant's real reply the right candidate among others'."""
    path = DATA / "zh-dev" / "dialogs.jsonl"
    if not path.exists():
        pytest.skip(f"zh-dev not found at {path} (set JEV_SHARED_DATA)")
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines()[:200]:
        msgs = json.loads(line)["messages"]
        pairs += [
            (msgs[i]["content"], msgs[i + 1]["content"][:60])
            for i in range(len(msgs) - 1)
            if msgs[i]["role"] == "user" and msgs[i + 1]["role"] == "assistant"
        ][:1]
    return labelled("zh", pairs)


def labelled(lang: str, pairs: list[tuple[str, str]]) -> list[dict]:
    rng = random.Random(26)
    picked = rng.sample(pairs, DECISIONS)
    out = []
    for n, (state, right) in enumerate(picked):
        texts = [right, *rng.sample([b for _, b in pairs if b != right], CANDIDATES - 1)]
        rng.shuffle(texts)
        out.append(
            {
                "request_id": f"{lang}-{n}",
                "state": state,
                "label": f"c{texts.index(right)}",
                "candidates": [{"id": f"c{i}", "text": t} for i, t in enumerate(texts)],
            }
        )
    return out


def score(tmp_path, capsys, lines: list[dict], *args, timeout: tuple = ("--timeout-ms", "600000")) -> list[dict]:
    path = tmp_path / "decisions.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    assert cli.main(["score", str(path), "--json", "--mode", "fine-only", *timeout, *args]) == 0
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("build", [english, chinese], ids=["en", "zh"])
def test_jev_score_with_the_served_model_beside_a_built_in_tier(model_server, tmp_path, capsys, build):
    lines = build()
    rows = score(tmp_path, capsys, lines, "--model", MODEL, "--model-url", model_server.url)
    summary = rows[-1]
    assert summary["model"] == MODEL and summary["decisions"] == DECISIONS
    assert summary["tiers"] == {"fine": DECISIONS} and summary["fallbacks"] == 0
    assert summary["calls_per_decision"] == 1.0  # every candidate of a decision in one call
    assert 0.0 <= summary["accuracy"] <= 1.0
    assert all(r["chain"] == [f"fine:{MODEL}"] for r in rows[:-1])
    # Jev's count is the GGUF vocabulary's count of the prompt it sent (+1: the one output token asked for)
    for line, row in zip(lines, rows):
        prompt = choice_prompt(
            work_for(
                Request.from_data({**line, "tenant": "t", "service": "s", "decision_type": "ranking"}), "gpt-4o-mini"
            ).context,
            [c["text"] for c in line["candidates"]],
        )
        assert row["mechanisms"]["fine"]["actual"] == tokens.count(prompt, MODEL) + 1
    assert summary["tokens_server"] > 0 and abs(summary["drift"]) <= 0.05

    built_in = score(tmp_path, capsys, lines, "--model", "lexical")[-1]
    assert built_in["model"] == "lexical" and built_in["calls_per_decision"] == 0.0
    assert built_in["tokens_server"] is None and built_in["drift"] is None and built_in["tokens_nominal"] > 0
    assert set(built_in) == set(summary)  # the same summary keys for a served model and a built-in tier


def test_the_served_models_drift_in_clickhouse_and_the_gauge(model_server, usage_db):
    pool = pool_mod.load()
    entry = dataclasses.replace(pool[MODEL], base_url=model_server.url)
    fine = registry.scorer(MODEL, pool.with_model(entry))
    engine = Engine(coarse=LexicalBackend(), fine=fine, config=policy.load().with_timeout(600_000), mode="fine-only")
    works = [
        work_for(
            Request(
                request_id=line["request_id"],
                tenant="acme",
                service="support",
                decision_type="ranking",
                state=line["state"],
                candidates=[Candidate(**c) for c in line["candidates"]],
            ),
            "gpt-4o-mini",
        )
        for line in english()[:2] + chinese()[:2]
    ]
    results = engine.decide_batch(works)
    assert all(d.tier == "fine" for d, _ in results)
    events = [e for _, evs in results for e in evs]
    assert {e.count_source for e in events if e.model == MODEL} == {"server"}
    UsageSink(usage_db).insert(events)  # the sink also sets the process's jev_token_count_drift
    row = by_model(usage_db, datetime.datetime(2020, 1, 1))[MODEL]
    assert row["calls"] == len(works) and abs(row["drift"]) <= 0.05
    assert abs(REGISTRY.get_sample_value("jev_token_count_drift", {"model": MODEL})) <= 0.05


@pytest.mark.parametrize(
    "question", ["My parcel arrived broken. What should I do?", "我的包裹到的时候坏了，我该怎么办？"], ids=["en", "zh"]
)
def test_a_chat_calls_count_includes_the_chat_template(model_server, question):
    pool = pool_mod.load()
    engine = registry.generator(MODEL, pool.with_model(dataclasses.replace(pool[MODEL], base_url=model_server.url)))
    answer = engine.generate(question, 8)
    assert answer.server is not None and answer.text
    assert answer.input_tokens == answer.server.prompt_tokens  # the message + SmolLM2's template (30 tokens)
    assert answer.output_tokens == answer.server.completion_tokens  # what the server generated, as it counted it


def test_local_model_starts_the_bundled_server_for_the_run(tmp_path, capsys, monkeypatch):
    from infra.model_server import missing

    if missing():
        pytest.skip(missing())
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path / "jev"))
    rows = score(tmp_path, capsys, english()[:1], "--local-model", timeout=())  # its own default: 60 s
    assert rows[-1]["model"] == MODEL and rows[-1]["tiers"] == {"fine": 1} and rows[-1]["calls_per_decision"] == 1.0
    assert (tmp_path / "jev" / "model_server.log").exists()  # the server it started logged there
