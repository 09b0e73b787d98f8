"""A broker writer replays a validly signed record it read: one settle of 170 tokens, copied with its signature
200 times onto the budget topic of the real local broker. The budget owner counts it once, so the tenant is not
pushed to over_budget (before: 201 x 170 = 34,170 of a 20,000-token hard budget spent, every later lease refused).
A lease return replayed frees nothing more than it held either."""

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from infra.broker import LocalBroker, create_topics
from schemas.records import BudgetEvent, Control, Decision, Request, Work
from schemas.topics import name
from streams.budgets.book import BudgetBook
from streams.budgets.lease_owner import LeaseOwner
from streams.runtime.leases import BudgetOwner, LeaseClient

KEY, HARD, ACTUAL, REPLAYS = "tenant:acme@day", 20_000, 170, 200


@pytest.fixture
def url(settings):
    """A broker of this test's own, and this process signing with its data directory's key (a stage process's)."""
    from streams.security import signing

    signing.configure(settings)
    with LocalBroker() as broker:
        yield broker.url.removeprefix("kafka://")


async def signed_send(bootstrap: str):
    """A send as a stage process's Sender makes it (signed), and the producer to stop."""
    from streams.security import signing

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()

    async def send(topic, values):
        for partition, value in values:
            await producer.send_and_wait(topic, value, partition=partition, headers=signing.headers(topic, value))

    return send, producer


async def replay(bootstrap: str, kind: str, times: int) -> int:
    """Copy the first `kind` record of the budget topic, signature and all, `times` times; how many were copied."""
    consumer = AIOKafkaConsumer(
        name("budget"), bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        original = None
        deadline = time.monotonic() + 15
        while original is None and time.monotonic() < deadline:
            for msgs in (await consumer.getmany(timeout_ms=200)).values():
                original = original or next((m for m in msgs if BudgetEvent.loads(m.value).kind == kind), None)
    finally:
        await consumer.stop()
    assert original is not None, f"no {kind} on the budget topic to replay"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for _ in range(times):
            await producer.send(name("budget"), original.value, partition=0, headers=list(original.headers))
        await producer.flush()
    finally:
        await producer.stop()
    return times


def decided_work(lease_id: str, request_id: str, reserved: int) -> Work:
    request = Request.from_data(
        {"request_id": request_id, "tenant": "acme", "service": "s", "decision_type": "ranking", "state": "x"}
    )
    return Work(
        request=request,
        admitted_at=time.time(),
        model="gpt-4o-mini",
        budget_holds={KEY: lease_id},
        budget_tokens=reserved,
        decision=Decision(request_id=request_id, tier="llm", input_tokens=ACTUAL - 20, output_tokens=20),
    )


async def test_a_settle_replayed_200_times_does_not_push_the_tenant_over_budget(url):
    bootstrap = url
    await create_topics(bootstrap, [name("budget"), name("leases")], 1)
    book = BudgetBook()
    book.apply(Control(kind="budget", key="tenant:acme", value={"hard_tokens": HARD}))
    send, producer = await signed_send(bootstrap)
    owner = BudgetOwner(bootstrap, "replay", book, send, lease_s=60.0, grace_s=60.0)
    client = LeaseClient(bootstrap, "replay", 1, book, send, share=0.05, lease_s=60.0)
    tasks = [asyncio.create_task(owner.run()), asyncio.create_task(client.run())]
    try:
        assert await asyncio.wait_for(await client.ask(KEY, "", 1_000), 30) == 1_000
        lease_id = client.holder.leases[KEY].lease_id
        await client.settle([decided_work(lease_id, "r1", 300)])  # one genuine settle of 170 tokens
        assert await replay(bootstrap, "settle", REPLAYS) == REPLAYS
        later = await asyncio.wait_for(await client.ask(KEY, lease_id, 5_000), 30)  # answered after every replay
        assert owner.owners[0].accounts[KEY].used == ACTUAL  # counted once, not 201 times
        assert later == 5_000  # the tenant still has its budget: not over_budget
    finally:
        client.stopping.set()
        owner.stopping.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.stop()


def test_a_replayed_return_or_settle_counts_once_and_distinct_ones_each_count():
    """The owner's fold on its own: the same change twice is one; two changes with their own ids are two; an event
    without an id (written before ids) is identified by its content."""
    owner = LeaseOwner(lambda key: (HARD, "day"), 60.0, 60.0)
    grant = owner.grant(BudgetEvent(kind="lease", key=KEY, holder="h", request="ask", tokens=1_000), time.time())
    common = dict(key=KEY, holder="h", lease_id=grant.lease_id, window=grant.window)
    for event in (
        BudgetEvent(kind="settle", request="s1", reserved=100, actual=60, **common),
        BudgetEvent(kind="settle", request="s1", reserved=100, actual=60, **common),
        BudgetEvent(kind="settle", request="s2", reserved=100, actual=70, **common),
        BudgetEvent(kind="settle", reserved=50, actual=5, ts=1.0, **common),
        BudgetEvent(kind="settle", reserved=50, actual=5, ts=1.0, **common),
        BudgetEvent(kind="return", request="back", tokens=300, **common),
        BudgetEvent(kind="return", request="back", tokens=300, **common),
    ):
        owner.apply(event)
    account = owner.accounts[KEY]
    assert account.used == 60 + 70 + 5
    assert account.leases[grant.lease_id].held == 1_000 - 250 - 300
