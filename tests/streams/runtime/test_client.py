"""JevClient without a broker: what a request carries, whose tenant it names, and how replies read off the
tenant's topics resolve calls (decision, rejection, review; a stream's chunks in order without repeats)."""

import asyncio
from types import SimpleNamespace

import orjson
import pytest

from schemas.records import Chunk, Decision, Rejection
from streams.core.tenants import SIGNATURE_HEADER, signature, unbound
from streams.runtime.client import JevClient, JevError, JevHeld, JevRejected, JevTimeout, ReplyStream


def message(record, key: str):
    return SimpleNamespace(key=key.encode(), value=orjson.dumps(record.to_representation()))


def client(settings, tenant="客服") -> JevClient:
    return JevClient(tenant, settings=settings, service="checkout")


def test_a_request_is_filled_in_and_always_the_clients_tenant(settings):
    jev = client(settings, "Acme")
    body = jev.body({"decision_type": "ranking", "state": "x"})
    assert body["tenant"] == "acme" and body["service"] == "checkout" and body["request_id"] and body["created_at"]
    assert jev.body({"tenant": "ＡＣＭＥ", "request_id": "r1", "state": "x"})["request_id"] == "r1"  # one spelling
    with pytest.raises(ValueError, match="this client sends for tenant 'acme', the request names 'globex'"):
        jev.body({"tenant": "globex", "state": "x"})
    with pytest.raises(ValueError, match="U\\+200B"):
        JevClient("ac\u200bme", settings=settings)
    zh = client(settings)
    assert zh.body({"state": "你好"})["tenant"] == "客服" and all(t.startswith("jev.tenant._") for t in zh.topics)


def test_a_request_is_signed_with_the_tenants_key_as_ingest_checks_it(settings, tmp_path):
    keys = tmp_path / "keys.json"
    keys.write_text(orjson.dumps({"acme": "k" * 32, "客服": "z" * 32}).decode())
    keys.chmod(0o600)
    sent = []

    class Producer:
        async def send_and_wait(self, topic, value, key=None, headers=None):
            sent.append((topic, value, key, headers))

    jev = JevClient("客服", settings=settings.replace(tenant_keys=str(keys)))
    jev.producer = Producer()
    asyncio.run(jev.send(jev.body({"request_id": "r1", "state": "退款"})))
    topic, raw, key, headers = sent[0]
    assert (
        topic == "jev.requests.v1"
        and key == b"r1"
        and headers == [(SIGNATURE_HEADER, signature(b"z" * 32, raw).encode())]
    )
    assert unbound({"客服": b"z" * 32}, "客服", raw, headers) == ""  # ingest admits it
    with pytest.raises(JevError, match="holds no key for tenant 'globex'"):
        JevClient("globex", settings=settings.replace(tenant_keys=str(keys)))


def test_replies_resolve_their_calls_and_ignore_others(settings):
    async def run():
        jev = client(settings)
        kinds = {kind: topic for topic, kind in jev.topics.items()}
        done, refused, held = jev._track("a"), jev._track("b"), jev._track("c")
        jev._dispatch("decisions", message(Decision(request_id="zz", tier="rules"), "zz"))  # no call waits for it
        jev._dispatch("decisions", message(Decision(request_id="a", tier="rules", action_id="refund"), "a"))
        jev._dispatch("decisions", message(Decision(request_id="a", tier="llm"), "a"))  # a repeat: the first stands
        rejection = Rejection(
            reason="rate_limited",
            detail="发送太快",
            stage="ingest",
            original="",
            ts=0.0,
            request_id="b",
            retry_after_s=1.5,
        )
        jev._dispatch("rejected", message(rejection, "b"))
        jev._dispatch("review", message(Decision(request_id="c", tier="llm", chain=["review:sensitive"]), "c"))
        assert (await done.future).action_id == "refund"
        with pytest.raises(JevRejected) as caught:
            await refused.future
        assert (caught.value.reason, caught.value.detail, caught.value.retry_after) == ("rate_limited", "发送太快", 1.5)
        with pytest.raises(JevHeld, match="held for human review"):
            await held.future
        assert set(kinds) == {"decisions", "chunks", "rejected", "review", "batch_results"}

    asyncio.run(run())


def test_a_stream_yields_its_chunks_in_seq_order_once_then_holds_the_decision(settings):
    async def run():
        jev = client(settings)
        jev.reader = asyncio.create_task(asyncio.sleep(3600))  # started, as far as the stream can tell
        jev.send = lambda body: asyncio.sleep(0)
        replies = ReplyStream(jev, jev.body({"request_id": "s1", "state": "你好"}), timeout=5)

        def chunk(seq, text, final=False):
            return message(
                Chunk(
                    request_id="s1",
                    seq=seq,
                    text=text,
                    tokens=1,
                    tokens_so_far=seq + 1,
                    progress=100 if final else 50,
                    final=final,
                ),
                "s1",
            )

        async def feed():
            await asyncio.sleep(0.05)
            for seq, text, final in [(1, "好", False), (0, "你", False), (1, "好", False), (2, "！", True)]:
                jev._dispatch("chunks", chunk(seq, text, final))
            jev._dispatch("decisions", message(Decision(request_id="s1", tier="llm", text="你好！"), "s1"))

        feeding = asyncio.create_task(feed())
        texts = [c.text async for c in replies]
        await feeding
        jev.reader.cancel()
        assert texts == ["你", "好", "！"] and replies.decision.text == "你好！" and "s1" not in jev.calls

    asyncio.run(run())


def test_an_unanswered_call_times_out_naming_the_retry(settings):
    async def run():
        jev = client(settings, "acme")
        jev.reader = asyncio.create_task(asyncio.sleep(3600))
        jev.send = lambda body: asyncio.sleep(0)
        with pytest.raises(JevTimeout, match="same request_id 'r9' \\(idempotent\\)"):
            await jev.request({"request_id": "r9", "state": "x"}, timeout=0.1)
        jev.reader.cancel()
        assert "r9" not in jev.calls

    asyncio.run(run())


def test_a_call_before_start_says_how_to_start(settings):
    with pytest.raises(JevError, match="async with JevClient"):
        asyncio.run(client(settings).request({"state": "x"}))


def test_a_batch_job_ends_with_its_results_or_names_the_refused_members(settings):
    from schemas.batch import BatchResult
    from streams.runtime.client import _Job

    async def run():
        jev = client(settings)
        job = jev.jobs["周报:1"] = _Job({"a", "b"})
        result = BatchResult(job="周报:1", member="a", kind="k", template="t", status="ok", call_id="c", text="好")
        jev._dispatch("batch_results", message(result, "周报:1"))
        assert not job.done.is_set()
        refusal = Rejection(
            reason="over_budget", detail="raise the budget", stage="batch", original="", ts=0.0, request_id="周报:1:b"
        )
        jev._dispatch("rejected", message(refusal, "周报:1:b"))
        assert job.done.is_set() and job.results["a"].text == "好" and job.refused["b"].reason == "over_budget"

    asyncio.run(run())
