"""The HTTP gateway against the real pipeline (local broker, embedded ClickHouse, the stages and a scoring worker),
called by real clients: the official openai SDK (plain and streamed, its usage equal to what ClickHouse metered for
the request), `curl -N` on the stream, plain HTTP for the native decisions endpoint, in English and Chinese; keys
that map to tenants (added and revoked while it runs), OpenAI-shaped errors, two tenants that never see each
other's answers, a caller that hangs up mid-stream stopping its generation and metered for what was generated, a
body over the size limit refused in OpenAI's shape, and the README's two snippets run as written."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import openai
import orjson
import pytest
import yaml

from workers.harness.pipeline import Pipeline, free_port, known_decision_types
from workers.processes import gateway

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]

QUESTIONS = {
    "en": "My parcel to Lyon is three days late. Where is it?\nReference: parcels to Lyon arrive in 3 days.",
    "zh": "我寄往上海的包裹晚了三天，现在在哪里？\n参考：寄往上海的包裹三天内送达。",
}
DECISIONS = {
    "en": ("Customer: the mug arrived broken and I want my money back.", ["Offer a discount", "Issue a refund"]),
    "zh": ("顾客：杯子到货时已经碎了，我要退款。", ["给下次订单打折", "为破损的杯子退款"]),
}
LONG_REFERENCE = "\n".join(
    f"Parcels to warehouse {h} leave within {h % 47 + 1} hours of payment and arrive in {h % 5 + 2} working days."
    for h in range(40)
)
LONG_REFERENCE_ZH = "\n".join(
    f"发往{h}号仓库的包裹在付款后{h % 47 + 1}小时内发出，{h % 5 + 2}个工作日内送达。" for h in range(40)
)


@contextlib.asynccontextmanager
async def served_gateway(settings):
    """The pipeline and the gateway in front of it: (pipeline, base URL, key store)."""
    async with Pipeline(settings, known_decision_types()) as pipe:
        port = free_port()
        runner = await gateway.start(pipe.settings, port=port)
        try:
            yield pipe, f"http://127.0.0.1:{port}", gateway.keys_for(pipe.settings)
        finally:
            await runner.cleanup()


async def metered(pipe, tenant: str, request_id: str) -> tuple[int, int]:
    """Input and output tokens ClickHouse holds for the request (every stage but the shadow twin), once its
    postprocess row (written with its decision) has landed."""
    where = "tenant = {t:String} AND request_id = {r:String}"
    for _ in range(100):
        done = pipe.ch.query(
            f"SELECT count() FROM usage_events FINAL WHERE {where} AND stage = 'postprocess'",
            parameters={"t": tenant, "r": request_id},
        ).result_rows[0][0]
        if done:
            break
        await asyncio.sleep(0.2)
    row = pipe.ch.query(
        f"SELECT sum(input_tokens), sum(output_tokens), count() FROM usage_events FINAL WHERE {where} "
        "AND stage != 'shadow'",
        parameters={"t": tenant, "r": request_id},
    ).result_rows[0]
    assert row[2] > 0, f"no usage rows for {tenant}/{request_id}"
    return int(row[0]), int(row[1])


async def chat_both_ways(pipe, sdk: openai.AsyncOpenAI, tenant: str, model: str, lang: str) -> None:
    """One plain and one streamed completion (with include_usage); each one's usage is what ClickHouse metered."""
    plain = await sdk.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": QUESTIONS[lang]}],
        max_tokens=48,
    )
    assert plain.choices[0].message.content.strip() and plain.choices[0].finish_reason in ("stop", "length")
    rid = plain.id.removeprefix("chatcmpl-")
    assert (plain.usage.prompt_tokens, plain.usage.completion_tokens) == await metered(pipe, tenant, rid)
    assert plain.usage.total_tokens == plain.usage.prompt_tokens + plain.usage.completion_tokens
    assert plain.usage.prompt_tokens > 0 and plain.usage.completion_tokens > 0  # a new question: generated, not cached

    stream = await sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": QUESTIONS[lang] + ("\n" + "again" if lang == "en" else "\n再问一次")}],
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, usage, finish = [], None, None
    async for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert "".join(parts).strip() and finish == "stop" and usage is not None and usage.completion_tokens > 0
    rid = chunk.id.removeprefix("chatcmpl-")
    assert (usage.prompt_tokens, usage.completion_tokens) == await metered(pipe, tenant, rid)
    if lang == "zh":
        assert re.search(r"[\u4e00-\u9fff]", "".join(parts))


def stream_config(tmp_path: Path, base: str = "", creative: int = 512, mobile: dict | None = None) -> str:
    """A stream.yaml (the bundled one, or `base`) whose creative answers are `creative` tokens long, and with
    `mobile` as the mobile client's chunk size and pace where given: a stream the test hangs up on is still
    generating when the cancel arrives, however loaded the machine."""
    from streams.output.chunks import BUNDLED

    config = yaml.safe_load((Path(base) if base else BUNDLED).read_text(encoding="utf-8"))
    config["types"]["creative"]["max_output_tokens"] = creative
    if mobile:
        config["clients"]["mobile"] = mobile
    path = tmp_path / "stream.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return str(path)


async def streamed_row(pipe, tenant: str, request_id: str) -> dict:
    """The scoring worker's usage row of a streamed answer, once it has landed."""
    names = ("outcome", "output_tokens", "delivered_tokens")
    query = (
        f"SELECT {', '.join(names)} FROM usage_events FINAL WHERE tenant = {{t:String}} AND request_id = {{r:String}} "
        "AND stage = 'score' AND section = 'stream'"
    )
    for _ in range(300):
        rows = pipe.ch.query(query, parameters={"t": tenant, "r": request_id}).result_rows
        if rows:
            return dict(zip(names, rows[0]))
        await asyncio.sleep(0.2)
    raise AssertionError(f"no stream row for {tenant}/{request_id}")


async def hang_up(pipe, sdk: openai.AsyncOpenAI, tenant: str, model: str, question: str, limit: int) -> dict:
    """A long streamed answer the caller closes after two chunks: the stream stops (outcome cancelled, fewer tokens
    delivered than the limit) and what was generated is metered, delivered or not; the row, for what the caller
    asserts of the generation itself."""
    stream = await sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": question}],
        stream=True,
        max_tokens=limit,
        extra_body={"client": "mobile", "question_type": "creative"},
    )
    got = []
    async for chunk in stream:
        got.append(chunk)
        if len(got) == 2:
            break
    await stream.close()
    rid = got[0].id.removeprefix("chatcmpl-")
    row = await streamed_row(pipe, tenant, rid)
    assert row["outcome"] == "cancelled", row
    assert 0 < row["delivered_tokens"] <= row["output_tokens"] and row["delivered_tokens"] < limit, row
    _, output = await metered(pipe, tenant, rid)
    assert output >= row["output_tokens"]  # metered: the pipeline's rows hold what the scoring worker generated
    return row


async def curl_stream(url: str, key: str, body: dict) -> list[str]:
    proc = await asyncio.create_subprocess_exec(
        "curl",
        "-sN",
        f"{url}/v1/chat/completions",
        "-H",
        f"Authorization: Bearer {key}",
        "-H",
        "Content-Type: application/json",
        "-d",
        orjson.dumps(body).decode(),
        stdout=subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    return [line.removeprefix("data: ") for line in out.decode().splitlines() if line.startswith("data: ")]


def readme_snippet(heading: str) -> str:
    """The first python block under the README line that starts with `heading`."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index(heading) :]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


async def run_snippet(code: str, env: dict) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()[-3000:]
    return out.decode()


async def test_real_clients_through_the_gateway(settings, clickhouse_dsn, usage_db, tmp_path):
    settings = settings.replace(
        backend="lexical",
        clickhouse_dsn=clickhouse_dsn,
        tenant_rates="slow=1:1000000",
        stream_config=stream_config(tmp_path, mobile={"chunk_tokens": 16, "tokens_per_s": 16}),
    )
    async with served_gateway(settings) as (pipe, url, keys):
        _, acme = keys.add("acme")
        _, globex = keys.add("globex")
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=acme, max_retries=0)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/health") as r:
                assert r.status == 200
            models = [m.id for m in (await sdk.models.list()).data]
            assert models == [m.name for m in gateway.generator_models(pipe.settings)] and models

            for model in models:
                for lang in ("en", "zh"):
                    await chat_both_ways(pipe, sdk, "acme", model, lang)

            # curl -N on the stream: data events, the last [DONE], the usage event before it
            events = await curl_stream(
                url,
                acme,
                {
                    "model": models[0],
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": QUESTIONS["zh"] + "\n第三次"}],
                },
            )
            assert events[-1] == "[DONE]" and len(events) >= 3
            parsed = [orjson.loads(e) for e in events[:-1]]
            assert parsed[0]["choices"][0]["delta"]["role"] == "assistant"
            assert parsed[-1]["choices"] == [] and parsed[-1]["usage"]["total_tokens"] > 0

            # errors in OpenAI's shape
            with pytest.raises(openai.AuthenticationError) as wrong:
                await openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="jev-wrong", max_retries=0).models.list()
            assert wrong.value.status_code == 401 and wrong.value.code == "invalid_api_key"
            async with http.post(f"{url}/v1/chat/completions", json={"model": models[0]}) as r:
                assert r.status == 401 and (await r.json())["error"]["code"] == "missing_api_key"
            with pytest.raises(openai.NotFoundError) as unknown:
                await sdk.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
            assert unknown.value.code == "model_not_found" and unknown.value.param == "model"
            for bad, param in (
                ({"messages": []}, "messages"),
                ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
                ({"messages": [{"role": "user", "content": "你好"}], "tenant": "globex"}, "tenant"),
                ({"messages": [{"role": "user", "content": "hi"}], "decision_type": "nope"}, "decision_type"),
            ):
                async with http.post(
                    f"{url}/v1/chat/completions",
                    json={"model": models[0], **bad},
                    headers={"Authorization": f"Bearer {acme}"},
                ) as r:
                    error = (await r.json())["error"]
                    assert r.status == 400 and error["param"] == param and error["message"], error
            slow_sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=keys.add("slow")[1], max_retries=0)
            limited = None
            for i in range(6):  # JEV_TENANT_RATES: one request a second for tenant slow
                try:
                    await slow_sdk.chat.completions.create(
                        model=models[0], messages=[{"role": "user", "content": f"question {i}?"}]
                    )
                except openai.RateLimitError as exc:
                    limited = exc
                    break
            assert limited is not None and int(limited.response.headers["Retry-After"]) >= 1
            assert limited.code == "rate_limit_exceeded"
            with pytest.raises(openai.APIStatusError) as too_large:  # over JEV_MAX_RECORD_BYTES: OpenAI's shape
                await sdk.chat.completions.create(
                    model=models[0],
                    messages=[{"role": "user", "content": "长" * pipe.settings.max_record_bytes}],
                )
            assert too_large.value.status_code == 413 and too_large.value.code == "request_too_large"
            assert "JEV_MAX_RECORD_BYTES" in too_large.value.message
            assert str(pipe.settings.max_record_bytes) in too_large.value.message

            # the native decisions endpoint, English and Chinese
            for lang, (state, texts) in DECISIONS.items():
                body = {
                    "decision_type": "customer_service",
                    "state": state,
                    "candidates": [{"id": f"c{i}", "text": t} for i, t in enumerate(texts)],
                }
                async with http.post(
                    f"{url}/v1/decisions", json=body, headers={"Authorization": f"Bearer {acme}"}
                ) as r:
                    answer = await r.json()
                    assert r.status == 200, answer
                assert answer["action_id"] in ("c0", "c1") and answer["tier"], (lang, answer)
                assert {x["id"] for x in answer["ranking"]} <= {"c0", "c1"}

            # two tenants, the same idempotency key: each gets its own answer, never the other's
            same = {"Idempotency-Key": "shared-id-1"}
            acme_reply = await sdk.chat.completions.create(
                model=models[0],
                messages=[
                    {"role": "user", "content": "Acme order 7781: where is it?\nReference: order 7781 ships Monday."}
                ],
                extra_headers=same,
            )
            globex_reply = await openai.AsyncOpenAI(
                base_url=f"{url}/v1", api_key=globex, max_retries=0
            ).chat.completions.create(
                model=models[0],
                messages=[{"role": "user", "content": "环球订单 5512 在哪里？\n参考：订单 5512 周五发货。"}],
                extra_headers=same,
            )
            assert "7781" in acme_reply.choices[0].message.content
            assert "5512" in globex_reply.choices[0].message.content
            assert "5512" not in acme_reply.choices[0].message.content
            assert "7781" not in globex_reply.choices[0].message.content

            # a caller hanging up mid-stream: its generation stops, what was generated is metered; a cancel names its
            # tenant, so globex's stream of the same request id (an Idempotency-Key both chose) goes on to its end
            globex_sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=globex, max_retries=0)
            for question in ("How long does delivery take?\n" + LONG_REFERENCE, "配送需要多久？\n" + LONG_REFERENCE_ZH):
                await hang_up(pipe, sdk, "acme", models[0], question, 400)  # the extractive answer exists at once
            same = {"Idempotency-Key": "shared-stream-1"}
            body = {"client": "mobile", "question_type": "creative"}
            mine = await sdk.chat.completions.create(
                model=models[0],
                messages=[{"role": "user", "content": "Delivery times?\n" + LONG_REFERENCE}],
                stream=True,
                max_tokens=160,
                extra_body=body,
                extra_headers=same,
            )
            theirs = await globex_sdk.chat.completions.create(
                model=models[0],
                messages=[{"role": "user", "content": "送货时间？\n" + LONG_REFERENCE_ZH}],
                stream=True,
                max_tokens=160,  # ten seconds of chunks: streaming still when acme's cancel lands
                extra_body=body,
                extra_headers=same,
            )
            async for _ in mine:
                break
            await mine.close()
            finish = [c.choices[0].finish_reason async for c in theirs if c.choices]
            assert finish[-1] == "stop"
            assert (await streamed_row(pipe, "acme", "shared-stream-1"))["outcome"] == "cancelled"
            assert (await streamed_row(pipe, "globex", "shared-stream-1"))["outcome"] == "ok"

            # keys revoked and added while it runs
            assert keys.revoke(acme)
            with pytest.raises(openai.AuthenticationError):
                await sdk.models.list()
            fresh = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=keys.add("acme")[1], max_retries=0)
            assert (await fresh.models.list()).data

            # the README's snippets, as written, against this gateway and pipeline
            env = {"JEV_API_KEY": keys.add("acme")[1], "JEV_BROKER": pipe.settings.broker}
            sdk_code = readme_snippet("With the OpenAI SDK").replace("http://127.0.0.1:8080", url)
            assert "completion_tokens" in await run_snippet(sdk_code, env)
            client_out = await run_snippet(readme_snippet("With Jev's client library"), env)
            assert re.search(r"\b(refund|discount)\b", client_out), client_out


@pytest.mark.model_server
async def test_the_served_model_through_the_gateway(model_server, settings, clickhouse_dsn, usage_db, tmp_path):
    """SmolLM2 on llama.cpp's server answers through the gateway: every model /v1/models lists, plain and streamed,
    English and Chinese, usage equal to ClickHouse's (the server's own counts, reconciled by the pipeline); a long
    answer the caller hangs up on stops generating on the server, metered for what it generated; with the server
    killed, a 503 naming the fallback's reason."""
    from workers.harness.demo import served_settings

    settings = served_settings(
        settings.replace(backend="lexical", clickhouse_dsn=clickhouse_dsn, gateway_timeout_s=900.0),
        model_server.url,
        1,
        False,
    )  # one call at a time on a shared 2-core machine: minutes per answer under load
    # its answers are cut to a few tokens, but for the creative ones the test hangs up on
    settings = settings.replace(stream_config=stream_config(tmp_path, settings.stream_config, creative=400))
    async with served_gateway(settings) as (pipe, url, keys):
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=keys.add("acme")[1], max_retries=0, timeout=900)
        models = [m.id for m in (await sdk.models.list()).data]
        assert models == [model_server.model]
        for lang in ("en", "zh"):
            await chat_both_ways(pipe, sdk, "acme", models[0], lang)
        for story in (
            "Write a very long story about a lighthouse keeper and her cat.",
            "写一个很长的故事，讲一位灯塔看守人和她的猫。",
        ):
            row = await hang_up(pipe, sdk, "acme", models[0], story, 400)
            assert row["output_tokens"] < 400  # the server stopped generating: it was asked for 400
        model_server.kill()  # the generator's server gone: a 503 naming the fallback's reason, in OpenAI's shape
        with pytest.raises(openai.InternalServerError) as down:
            await sdk.chat.completions.create(model=models[0], messages=[{"role": "user", "content": "还在吗？"}])
        assert down.value.status_code == 503 and down.value.code == "model_unavailable"
        assert "model_unavailable" in down.value.message
