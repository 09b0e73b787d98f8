"""The client library against the real pipeline (local broker, Faust stages, scoring worker, ClickHouse engine),
two tenants live, in English and Chinese: each gets its decisions, streamed chunks and rejections, and a consumer
of one tenant's reply topics receives not one record of the other's."""

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer

from schemas.records import Chunk, Decision, Rejection
from streams.core.tenants import reply_topic
from streams.runtime.client import JevClient, JevRejected, SyncJevClient
from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration

POLICY = {"en": workload.POLICY, "zh": workload.POLICY_ZH}
QUESTIONS = {"en": "How long does delivery to Berlin take?", "zh": "从上海仓库发货到北京要多久？"}
CANDIDATES = {
    "en": [{"id": "refund", "text": "refund the order"}, {"id": "replace", "text": "send a replacement"}],
    "zh": [{"id": "refund", "text": "为订单退款"}, {"id": "replace", "text": "寄送替换商品"}],
}


async def read_all(bootstrap: str, topics: list[str]) -> list:
    """Every record on `topics` from their beginning (read until they are idle)."""
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    got = []
    try:
        while polled := await consumer.getmany(timeout_ms=3000):
            got += [(tp.topic, m) for tp, msgs in polled.items() for m in msgs]
    finally:
        await consumer.stop()
    return got


async def exchange(jev: JevClient, lang: str, run: str) -> dict:
    """One decide, one streamed answer and one rejected request of `jev`'s tenant; what came back, by kind."""
    decided = await jev.decide(
        QUESTIONS[lang], CANDIDATES[lang], decision_type="customer_service", request_id=f"{run}-{lang}-d"
    )
    again = await jev.decide(
        QUESTIONS[lang], CANDIDATES[lang], decision_type="customer_service", request_id=f"{run}-{lang}-d"
    )  # a retry under the same id: the first decision again
    replies = jev.stream(
        QUESTIONS[lang], request_id=f"{run}-{lang}-s", history=[{"role": "system", "content": POLICY[lang]}]
    )
    chunks = [chunk async for chunk in replies]
    with pytest.raises(JevRejected) as refused:
        await jev.request({"request_id": f"{run}-{lang}-r", "decision_type": "astrology", "state": QUESTIONS[lang]})
    return {"decided": decided, "again": again, "chunks": chunks, "streamed": replies.decision, "refused": refused}


async def test_two_tenants_each_read_their_own_replies_and_none_of_the_others(settings, clickhouse_dsn):
    run = uuid.uuid4().hex[:8]
    tenants = {"en": f"acme-{run}", "zh": f"客服{run}"}
    async with Pipeline(
        settings.replace(backend="lexical", clickhouse_dsn=clickhouse_dsn), known_decision_types()
    ) as pipe:
        async with (
            JevClient(tenants["en"], settings=pipe.settings, timeout=120) as en,
            JevClient(tenants["zh"], settings=pipe.settings, timeout=120) as zh,
        ):
            got = dict(zip(tenants, await asyncio.gather(exchange(en, "en", run), exchange(zh, "zh", run))))
            with pytest.raises(ValueError, match="this client sends for tenant"):
                await en.request({"tenant": tenants["zh"], "decision_type": "customer_service", "state": "x"})
        for lang, seen in got.items():
            assert seen["decided"].action_id in {"refund", "replace"} and seen["decided"].tenant == tenants[lang]
            assert seen["again"].request_id == seen["decided"].request_id
            assert [c.seq for c in seen["chunks"]] == list(range(len(seen["chunks"]))) and seen["chunks"][-1].final
            assert "".join(c.text for c in seen["chunks"]).strip() and seen["streamed"].tier
            assert (
                seen["refused"].value.reason == "unknown_decision_type" and "astrology" in seen["refused"].value.detail
            )
        assert any("\u4e00" <= ch <= "\u9fff" for c in got["zh"]["chunks"] for ch in c.text)  # answered in Chinese
        bootstrap = pipe.settings.bootstrap
        for lang, tenant in tenants.items():
            records = await read_all(bootstrap, [reply_topic(k, tenant) for k in ("decisions", "chunks", "rejected")])
            kinds = {topic.split(".")[-2] for topic, _ in records}
            assert kinds == {"decisions", "chunks", "rejected"}, kinds
            mine, theirs = f"{run}-{lang}-", f"{run}-{'zh' if lang == 'en' else 'en'}-"
            assert all(m.key.decode().startswith(mine) for _, m in records)
            assert sum(m.key.decode().startswith(theirs) or theirs.encode() in m.value for _, m in records) == 0
            for topic, m in records:
                record = {"decisions": Decision, "chunks": Chunk, "rejected": Rejection}[topic.split(".")[-2]].loads(
                    m.value
                )
                assert record.tenant == tenant
                assert not isinstance(record, Rejection) or record.original == ""  # the original stays internal


def test_the_sync_client_decides_in_a_script(settings, clickhouse_dsn):
    async def started():
        pipe = Pipeline(  # the stages in a child process: this thread blocks in the client, not in their loop
            settings.replace(backend="lexical", clickhouse_dsn=clickhouse_dsn),
            known_decision_types(),
            stages_process=True,
        )
        await pipe.__aenter__()
        return pipe

    loop = asyncio.new_event_loop()
    pipe = loop.run_until_complete(started())
    try:
        with SyncJevClient("globex", settings=pipe.settings, timeout=120) as jev:
            decision = jev.decide(QUESTIONS["zh"], CANDIDATES["zh"], decision_type="customer_service")
            chunks = list(jev.stream(QUESTIONS["en"], history=[{"role": "system", "content": POLICY["en"]}]))
        assert decision.action_id in {"refund", "replace"} and decision.tenant == "globex"
        assert chunks and chunks[-1].final
    finally:
        loop.run_until_complete(pipe.__aexit__(None, None, None))
        loop.close()
