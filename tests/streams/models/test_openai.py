"""The OpenAI-compatible engine against a scripted HTTP server (aiohttp on a local port): one call per decision,
streamed answers with usage in the forms servers send it, and every fault handled without losing a request.
The real model server runs in tests/integration (the `model_server` fixture)."""

import asyncio
import json
import threading
import time

import pytest
from aiohttp import web

from schemas.records import Candidate, Request
from streams.models import pool as pool_mod
from streams.models.http import server
from streams.models.lexical import LexicalBackend
from streams.models.openai import OpenAIEngine, label_scores
from streams.models.protocol import ModelUnavailable, Usage
from streams.scoring import policy
from streams.scoring.engine import Engine
from streams.scoring.factory import work_for
from streams.text import tokens

USAGE = {"prompt_tokens": 40, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 32}}


class Script:
    """What the fake server answers: `mode` per call, and every request body it received."""

    def __init__(self):
        self.mode = "ok"
        self.failures_left = 0  # calls answered with `fail_status` before the mode's answer
        self.fail_status = 503
        self.bodies: list[dict] = []
        self.paths: list[str] = []
        self.headers: list[dict] = []
        self.delay_s = 0.0  # each call takes this long, as a server that answers one request at a time
        self.in_flight = 0
        self.most_in_flight = 0  # the most calls the server held at once
        self.words = ["The ", "refund ", "is ", "on ", "its ", "way."]  # the chat answer, one piece per word
        self.finish = "stop"  # why the answer ended: stop (the model's end token) or length (max_tokens)
        self.generated = 6  # the usage's completion_tokens: the tokens the server says the model generated
        self.word_delay_s = 0.0  # a streamed answer's pause before each word, as a model generating it
        self.hung_up_after: int | None = None  # words a stream had written when its reader went away


def top_logprobs(prompt: str) -> dict:
    """Logprobs favouring the option whose text holds 'refund' (B in the tests)."""
    letters = [line[0] for line in prompt.splitlines() if len(line) > 2 and line[1:3] == ". "]
    best = next((line[0] for line in prompt.splitlines() if "refund" in line and line[1:3] == ". "), "A")
    return {(" " + letter): (-0.1 if letter == best else -3.0 - i) for i, letter in enumerate(letters)}


def make_app(script: Script) -> web.Application:
    @web.middleware
    async def counting(request, handler):
        if request.path == "/v1/models":
            return await handler(request)
        script.in_flight += 1
        script.most_in_flight = max(script.most_in_flight, script.in_flight)
        try:
            await asyncio.sleep(script.delay_s)
            return await handler(request)
        finally:
            script.in_flight -= 1

    async def models(request):
        return web.json_response({"data": [{"id": "fake-model"}]})

    async def completions(request):
        body = await request.json()
        script.bodies.append(body)
        script.paths.append(request.path)
        script.headers.append(dict(request.headers))
        if script.failures_left:
            script.failures_left -= 1
            return web.Response(status=script.fail_status, text="busy", headers={"Retry-After": "0"})
        if script.mode == "malformed":
            return web.Response(text="<html>gateway</html>", content_type="text/html")
        if script.mode == "slow":
            await asyncio.sleep(2)
        answer = {"choices": [{"text": " B", "logprobs": {"top_logprobs": [top_logprobs(body["prompt"])]}}]}
        if script.mode != "no_usage":
            answer["usage"] = USAGE
        return web.json_response(answer)

    async def chat(request):
        body = await request.json()
        script.bodies.append(body)
        script.paths.append(request.path)
        if script.failures_left:
            script.failures_left -= 1
            return web.Response(status=script.fail_status, text="busy")
        words = script.words
        if not body.get("stream"):
            answer = {"choices": [{"message": {"content": "".join(words)}, "finish_reason": script.finish}]}
            if script.mode != "no_usage":
                answer["usage"] = {"prompt_tokens": 12, "completion_tokens": script.generated}
            return web.json_response(answer)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, word in enumerate(words):
            chunk = {"choices": [{"delta": {"content": word}, "finish_reason": None}]}
            if script.mode == "cumulative":  # usage so far repeated in every chunk
                chunk["usage"] = {"prompt_tokens": 12, "completion_tokens": i + 1}
            await asyncio.sleep(script.word_delay_s)
            try:
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            except ConnectionResetError:
                script.hung_up_after = i
                return response
            if script.mode == "cut" and i == 2:
                request.transport.close()
                return response
        ended = {"choices": [{"delta": {}, "finish_reason": script.finish}]}
        await response.write(f"data: {json.dumps(ended)}\n\n".encode())
        await response.write(b"data: not json at all\n\n")
        if script.mode in ("ok", "usage_after_finish"):
            usage = {
                "prompt_tokens": 12,
                "completion_tokens": script.generated,
                "prompt_tokens_details": {"cached_tokens": 8},
            }
            await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    async def rerank(request):
        body = await request.json()
        script.bodies.append(body)
        return web.json_response(
            {
                "results": [
                    {"index": i, "relevance_score": 1.0 if "refund" in d else 0.1}
                    for i, d in enumerate(body["documents"])
                ],
                "usage": {"total_tokens": 30},
            }
        )

    app = web.Application(middlewares=[counting])
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/rerank", rerank)
    return app


@pytest.fixture
def fake_server():
    """(base_url, script) of a scripted server in its own thread and loop."""
    script = Script()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder = {}

    async def start():
        runner = web.AppRunner(make_app(script))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"], holder["port"] = runner, site._server.sockets[0].getsockname()[1]
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    started.wait(10)
    yield f"http://127.0.0.1:{holder['port']}/v1", script
    asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def engine(base_url: str, **options) -> OpenAIEngine:
    spec = pool_mod.ModelSpec(name="served", engine="openai", base_url=base_url, options={"backoff_s": 0.01, **options})
    return OpenAIEngine(spec)


CANDIDATES = ["ship a replacement", "issue a refund", "close the ticket"]


def test_one_call_scores_every_candidate_with_the_context_once(fake_server):
    url, script = fake_server
    scored = engine(url).score("Customer: my parcel never came, I want my money back", CANDIDATES)
    assert len(script.bodies) == 1 and script.bodies[0]["max_tokens"] == 1
    prompt = script.bodies[0]["prompt"]
    assert prompt.count("my parcel never came") == 1 and all(c in prompt for c in CANDIDATES)
    assert max(range(3), key=lambda i: scored.scores[i]) == 1
    assert scored.server == Usage(40, 1, 32) and scored.calls == 1 and scored.input_tokens > 0


def test_a_micro_batch_goes_as_concurrent_calls_one_per_decision(fake_server):
    url, script = fake_server
    items = [(f"Kunde {i}: 我想退款 refund please", CANDIDATES) for i in range(6)]
    results = engine(url, max_concurrency=2).score_many(items)
    assert len(script.bodies) == 6 and all(max(range(3), key=lambda i: r.scores[i]) == 1 for r in results)


def test_rerank_sends_the_query_once_and_reads_relevance(fake_server):
    url, script = fake_server
    scored = engine(url, decide="rerank").score("退款 refund request", CANDIDATES)
    assert script.bodies[0]["query"] == "退款 refund request" and scored.scores[1] == 1.0
    assert scored.server == Usage(30, 0, 0)


def test_missing_usage_leaves_the_server_count_empty(fake_server):
    url, script = fake_server
    script.mode = "no_usage"
    scored = engine(url).score("refund?", CANDIDATES)
    assert scored.server is None and scored.calls == 1 and len(scored.scores) == 3


def test_a_malformed_body_is_model_unavailable_not_a_crash(fake_server):
    url, script = fake_server
    script.mode = "malformed"
    with pytest.raises(ModelUnavailable, match="malformed"):
        engine(url).score("refund?", CANDIDATES)


def test_429_and_5xx_are_retried_inside_the_deadline(fake_server):
    url, script = fake_server
    script.failures_left, script.fail_status = 2, 429
    scored = engine(url).score("refund?", CANDIDATES)
    assert len(script.bodies) == 3 and scored.server is not None
    script.failures_left, script.fail_status = 100, 503
    started = time.time()
    [result] = engine(url, retries=50, backoff_s=0.05).score_many([("refund?", CANDIDATES)], [time.time() + 0.5])
    assert isinstance(result, ModelUnavailable) and time.time() - started < 1.5


def test_a_slow_server_cut_by_the_decisions_deadline_is_a_deadline_not_unavailable(fake_server):
    url, script = fake_server
    script.mode = "slow"
    eng = engine(url, breaker_failures=1)
    [result] = eng.score_many([("refund?", CANDIDATES)], [time.time() + 0.3])
    assert isinstance(result, ModelUnavailable) and result.reason == "deadline"
    script.mode = "ok"
    assert len(eng.score("refund", CANDIDATES).scores) == 3  # the busy server was not counted as failing


def test_calls_queue_for_the_servers_slots_without_failing_or_opening_the_circuit(fake_server):
    url, script = fake_server
    script.delay_s = 0.25  # 8 calls one at a time: 2 s in all, twice each call's own 1 s timeout
    eng = engine(url, max_concurrency=1, timeout_s=1.0, breaker_failures=1)
    items = [(f"顾客 {i}: 我想退款 refund please", CANDIDATES) for i in range(8)]
    results = eng.score_many(items, [time.time() + 10] * len(items))
    assert all(not isinstance(r, ModelUnavailable) for r in results), results
    assert script.most_in_flight == 1 and len(script.bodies) == 8 and server(url, {}).waited >= 7


def test_a_call_queued_past_its_deadline_is_a_deadline_and_never_sent(fake_server):
    url, script = fake_server
    script.delay_s = 0.4
    eng = engine(url, max_concurrency=1, breaker_failures=1)
    eng.served_name = "fake-model"  # no /models call: the first decision takes the free slot at once
    now = time.time()
    first, second = eng.score_many([("refund one", CANDIDATES), ("refund two", CANDIDATES)], [now + 5, now + 0.2])
    assert not isinstance(first, ModelUnavailable) and first.scores
    assert isinstance(second, ModelUnavailable) and second.reason == "deadline"
    assert len(script.bodies) == 1 and script.most_in_flight == 1
    assert len(eng.score("refund three", CANDIDATES).scores) == 3  # the circuit stayed closed


def test_a_stream_holds_its_slot_until_it_is_read(fake_server):
    url, script = fake_server
    script.delay_s = 0.2
    eng = engine(url, max_concurrency=1)
    streaming = eng.stream("Where is my refund? 我的退款在哪里？", 32)
    scored = []
    decide = threading.Thread(target=lambda: scored.append(eng.score("refund", CANDIDATES)))
    decide.start()
    text = "".join(streaming)
    decide.join(10)
    assert text == "The refund is on its way." and scored and scored[0].scores
    assert script.most_in_flight == 1 and [b.get("stream") for b in script.bodies] == [True, None]


def test_a_decision_queued_behind_the_server_falls_back_for_its_own_reason(fake_server):
    url, script = fake_server
    script.delay_s = 0.5
    served = engine(url, max_concurrency=1)
    eng = Engine(coarse=LexicalBackend(), fine=served, mode="fine-only", config=policy.load().with_timeout(60_000))
    works = [
        work_for(
            Request(
                request_id=f"q{i}",
                tenant="t",
                service="s",
                decision_type="ranking",
                state="我要退款 refund",
                deadline_ms=ms,
                candidates=[Candidate(id=str(j), text=t) for j, t in enumerate(CANDIDATES)],
            ),
            "gpt-4o-mini",
        )
        for i, ms in enumerate([30_000, 300])
    ]
    first, second = [d for d, _ in eng.decide_batch(works)]
    assert first.tier == "fine" and second.tier == "fallback"
    assert second.chain[0].startswith("fallback:deadline") and eng.counters["fallback_model_unavailable"] == 0


def test_the_circuit_opens_after_failures_in_a_row_then_lets_one_trial_through(fake_server):
    url, script = fake_server
    script.failures_left, script.fail_status = 10_000, 500
    eng = engine(url, retries=0, breaker_failures=3, breaker_cooldown_s=0.3)
    for _ in range(3):
        with pytest.raises(ModelUnavailable):
            eng.score("x", CANDIDATES)
    sent = len(script.bodies)
    with pytest.raises(ModelUnavailable, match="circuit open"):
        eng.score("x", CANDIDATES)
    assert len(script.bodies) == sent  # failed fast: nothing sent
    time.sleep(0.35)
    script.failures_left = 0
    assert len(eng.score("refund", CANDIDATES).scores) == 3  # the trial call closes it


def test_connect_errors_end_in_model_unavailable_within_the_deadline():
    eng = engine("http://127.0.0.1:9/v1", retries=50)
    started = time.time()
    [result] = eng.score_many([("x", CANDIDATES)], [time.time() + 0.4])
    assert isinstance(result, ModelUnavailable) and time.time() - started < 1.5


@pytest.mark.parametrize(
    "mode, usage",
    [
        ("ok", Usage(12, 6, 8)),
        ("usage_after_finish", Usage(12, 6, 8)),
        ("cumulative", Usage(12, 6, 0)),
        ("no_usage", None),
    ],
)
def test_a_stream_reads_its_usage_once_in_every_form(fake_server, mode, usage):
    url, script = fake_server
    script.mode = mode
    streaming = engine(url).stream("Where is my refund? 我的退款在哪里？", 32)
    text = "".join(streaming)
    assert text == "The refund is on its way." and streaming.server == usage
    assert script.bodies[-1]["stream_options"] == {"include_usage": True}


def test_a_stream_cut_by_the_server_keeps_its_text(fake_server):
    url, script = fake_server
    script.mode = "cut"
    streaming = engine(url).stream("refund?", 32)
    assert "".join(streaming) == "The refund is " and streaming.server is None


@pytest.mark.parametrize(
    "words, generated",
    [
        (["Sure! ", "The ", "refund ", "is ", "on ", "its ", "way."], 9),
        # a Chinese answer re-tokenized reads short of what the model generated (a character cut unfinished at the
        # length, byte tokens the server held back): the server's count stands
        (["当然可以！", "您的", "退款", "已经", "在路上。"], 31),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_the_output_is_what_the_server_generated_not_the_text_recounted(fake_server, words, generated, stream):
    url, script = fake_server
    script.words, script.generated = words, generated
    eng = engine(url)
    recounted = eng.count("".join(words)) + 1  # the text in the model's tokenizer and the end token
    assert recounted != generated  # the server's count is not what the text re-tokenizes to
    if stream:
        streaming = eng.stream("Where is my refund? 我的退款在哪里？", 32)
        first = next(iter(streaming))
        streaming.close()  # the caller's answer reached its length: the rest is read for the server's usage
        assert first == words[0] and streaming.server == Usage(12, generated, 8)
        output = streaming.output_tokens
    else:
        output = eng.generate("Where is my refund? 我的退款在哪里？", 32).output_tokens
    assert output == generated


@pytest.mark.parametrize("words", [[f"word{i} " for i in range(400)], [f"第{i}句。" for i in range(400)]])
def test_a_cancelled_stream_stops_the_server_and_counts_what_arrived(fake_server, words):
    url, script = fake_server
    script.words, script.word_delay_s = words, 0.05  # twenty seconds of answer
    eng = engine(url)
    streaming = eng.stream("Tell me everything. 告诉我一切。", 1000)
    pieces = iter(streaming)
    read = [next(pieces), next(pieces)]
    streaming.cancel()  # the caller went away: no grace for a closing usage that would come at the end
    deadline = time.monotonic() + 60
    while script.hung_up_after is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert read == words[:2] and script.hung_up_after is not None and script.hung_up_after < len(words) - 1
    assert streaming.server is None  # the server never got to its usage
    sent = "".join(words[: script.hung_up_after])
    assert eng.count("".join(read)) <= streaming.output_tokens <= eng.count(sent)  # what arrived, counted


def test_a_stream_counts_the_last_running_count_it_carried(fake_server):
    url, script = fake_server
    script.mode = "cumulative"  # usage so far in every chunk (vLLM's continuous_usage_stats), none at the end
    streaming = engine(url).stream("Where is my refund?", 32)
    "".join(streaming)
    assert streaming.output_tokens == len(script.words) == streaming.server.completion_tokens


@pytest.mark.parametrize("finish, end_token", [("stop", 1), ("length", 0)])
@pytest.mark.parametrize("stream", [False, True])
def test_without_the_servers_count_the_text_and_the_end_token_are_counted(fake_server, finish, end_token, stream):
    url, script = fake_server
    script.finish, script.mode = finish, "no_usage"
    eng = engine(url)
    if stream:
        streaming = eng.stream("Where is my refund?", 32)
        "".join(streaming)
        output = streaming.output_tokens
    else:
        output = eng.generate("我的退款在哪里？", 32).output_tokens
    assert output == eng.count("The refund is on its way.") + end_token


def test_a_stream_to_a_server_that_is_down_raises_before_any_piece():
    with pytest.raises(ModelUnavailable):
        engine("http://127.0.0.1:9/v1", retries=1, timeout_s=0.5).stream("x", 8)


def test_generate_reads_the_message_and_usage(fake_server):
    url, _ = fake_server
    out = engine(url).generate("Where is my refund?", 32)
    assert out.text == "The refund is on its way." and out.server == Usage(12, 6, 0) and out.label == "llm"


def test_the_api_key_goes_in_the_header_only(fake_server, monkeypatch):
    url, script = fake_server
    monkeypatch.setenv("JEV_TEST_KEY", "sk-secret-123")
    spec = pool_mod.ModelSpec(name="hosted", engine="openai", base_url=url, api_key_env="JEV_TEST_KEY")
    OpenAIEngine(spec).score("refund", CANDIDATES)
    assert script.headers[-1]["Authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in repr(spec) and "sk-secret" not in json.dumps(script.bodies)


def test_a_server_down_gives_fallback_model_unavailable_and_loses_nothing():
    eng = Engine(
        coarse=LexicalBackend(), fine=engine("http://127.0.0.1:9/v1", retries=1), mode="fine-only", config=policy.load()
    )
    requests = [
        Request(
            request_id=f"r{i}",
            tenant="t",
            service="s",
            decision_type="ranking",
            state="我要退款 refund",
            candidates=[Candidate(id=str(j), text=t) for j, t in enumerate(CANDIDATES)],
        )
        for i in range(3)
    ]
    decisions = eng.decide_batch([work_for(r, "gpt-4o-mini") for r in requests])
    assert [d.request_id for d, _ in decisions] == ["r0", "r1", "r2"]
    assert all(d.tier == "fallback" and d.chain[0].startswith("fallback:model_unavailable") for d, _ in decisions)


def test_label_scores_read_both_logprob_forms():
    assert label_scores([{"token": " B", "logprob": -0.5}, {"token": "A.", "logprob": -2.0}], ["A", "B", "C"]) == [
        -2.0,
        -0.5,
        -30.0,
    ]
    assert label_scores({" A": -1.0, "(B)": -0.2}, ["A", "B"]) == [-1.0, -0.2]


@pytest.mark.parametrize("stream", [False, True])
def test_a_generate_request_through_the_engine_is_metered_on_the_servers_count(fake_server, stream):
    from streams.output import chunks as stream_config

    url, _ = fake_server
    eng = Engine(
        coarse=LexicalBackend(),
        fine=LexicalBackend(),
        generator=engine(url),
        config=policy.load(),
        stream_config=stream_config.load(),
        chunk_sink=lambda chunk: None,
    )
    request = Request(
        request_id="g1",
        tenant="t",
        service="s",
        decision_type="customer_service",
        kind="generate",
        state="我的退款在哪里? Where is my refund?",
        stream=stream,
    )
    decision, events = eng.decide(work_for(request, "gpt-4o-mini"))
    assert decision.tier == "llm" and "refund" in decision.text
    [row] = [e for e in events if e.model == "served"]
    # Jev meters the output the server generated (its count), not the text re-tokenized: the two counts agree
    assert row.count_source == "server" and decision.output_tokens == 6
    assert row.output_tokens == row.server_output_tokens == 6
    assert engine(url).count("The refund is on its way.") + 1 != 6
    assert row.delivered_tokens == (tokens.count(decision.text, "gpt-4o-mini") if stream else 0)


STATE = {
    "en": "Policy: a broken item is refunded in full within 30 days; a late parcel gets its tracking link and a new "
    "delivery date; a wrong size is exchanged for free. Customer since 2019, three orders this year.\n",
    "zh": "政策：破损商品30天内全额退款；迟到的包裹提供物流链接和新的送达日期；尺码不对可以免费换货。"
    "顾客自2019年起购物，今年下了三个订单。\n",
}
ASKED = {
    "en": ["Customer: the mug arrived broken.", "Customer: my parcel is late."],
    "zh": ["顾客：杯子碎了。", "顾客：包裹迟到了。"],
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_sessions_next_decision_claims_the_state_the_servers_cache_holds(fake_server, lang):
    url, script = fake_server
    eng = engine(url, cache_block_tokens=16)
    first, second = (eng.score(STATE[lang] + asked, CANDIDATES) for asked in ASKED[lang])
    ids = [tokens.encoding("cl100k_base").encode_ordinary(body["prompt"]) for body in script.bodies]
    shared = next(i for i, (a, b) in enumerate(zip(*ids)) if a != b)
    assert first.cache_read_tokens == 0 and first.input_tokens == len(ids[0])
    assert second.cache_read_tokens == shared // 16 * 16 > 0  # the state's full blocks, claimed as cache reads
    assert second.server == Usage(40, 1, 32)  # beside the server's own count of them


def test_a_call_that_failed_leaves_nothing_claimed_and_one_in_flight_serves_the_next(fake_server):
    url, script = fake_server
    eng = engine(url, cache_block_tokens=16, retries=0)
    script.mode = "malformed"
    with pytest.raises(ModelUnavailable):
        eng.score(STATE["en"] + ASKED["en"][0], CANDIDATES)
    script.mode = "ok"
    assert eng.score(STATE["en"] + ASKED["en"][1], CANDIDATES).cache_read_tokens == 0
    # a call cut by its deadline most likely reached the server, which computed its prompt: its blocks stay claimed
    script.mode = "slow"
    [cut] = eng.score_many([(STATE["zh"] + ASKED["zh"][0], CANDIDATES)], [time.time() + 0.3])
    assert isinstance(cut, ModelUnavailable) and cut.reason == "deadline"
    script.mode = "ok"
    assert eng.score(STATE["zh"] + ASKED["zh"][1], CANDIDATES).cache_read_tokens > 0
    # a micro-batch sharing a new state: the server queues the others behind the first's prefill, which it serves
    batch = eng.score_many([(f"Session 2. {STATE['zh']}{asked}", CANDIDATES) for asked in ASKED["zh"] * 2])
    assert sorted(s.cache_read_tokens > 0 for s in batch) == [False, True, True, True]
