"""The budget owner and lease clients on the real local broker: two stage processes' runtimes share one hard budget,
settle anywhere, and a crashed holder's lease comes back after its expiry. And what a broker restarted without its
data loses: an owner answers the new log's requests, and a lease request lost with it is sent again."""

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from infra.broker import LocalBroker
from schemas.records import BudgetEvent, Control, Decision, Request, Work
from schemas.topics import name
from streams.budgets.book import BudgetBook, Refused
from streams.budgets.lease_holder import LeaseHold
from streams.budgets.lease_owner import LeaseOwner
from streams.runtime.leases import BudgetOwner, LeaseClient
from streams.security import signing
from tests.conftest import consumed, fresh_topic

HARD = 20_000


@pytest.fixture(scope="module")
def broker():
    """A broker of this module's own: on the session's broker, tests/security creates the budget topic with one
    partition first, and this module's two owners need four to share."""
    with LocalBroker() as b:
        yield b


def book():
    b = BudgetBook()
    b.leased_tokens = True
    b.apply(Control(kind="budget", key="tenant:acme", value={"hard_tokens": HARD}))
    return b


def work(i: int, tokens: int = 1000) -> Work:
    return Work(
        request=Request(request_id=f"r{i}", tenant="acme", service="s", decision_type="ranking", state="x"),
        admitted_at=time.time(),
        model="gpt-4o-mini",
        context_tokens=tokens - 256,
    )


async def wait_for(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)


async def test_two_processes_share_a_hard_budget_and_a_crashed_holders_lease_comes_back(broker):
    bootstrap = await fresh_topic(broker, name("budget"), 4)
    await fresh_topic(broker, name("leases"), 4)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()

    async def send(topic, values):
        await asyncio.gather(
            *[await producer.send(topic, v, partition=p, headers=signing.headers(topic, v)) for p, v in values]
        )

    books = [book(), book()]
    owners = [BudgetOwner(bootstrap, "lt", b, send, lease_s=1.0, grace_s=1.0) for b in books]
    clients = [LeaseClient(bootstrap, "lt", 4, b, send, share=0.25, lease_s=1.0, wait_s=10.0) for b in books]
    tasks = [asyncio.create_task(x.run()) for x in [*owners, *clients]]
    try:
        await wait_for(lambda: sum(len(o.owners) for o in owners) == 4, timeout=60.0)  # a group join, on a busy broker
        holds = await asyncio.gather(*(clients[i % 2].reserve(work(i), 1000) for i in range(30)))
        admitted = [h for h in holds if not isinstance(h, Refused)]
        assert len(admitted) * 1000 <= HARD and len(admitted) >= HARD // 1000 - 6  # little stranded in leases
        settled = work(0)
        settled.budget_holds, settled.budget_tokens = admitted[0].leases, admitted[0].tokens
        settled.decision = Decision(request_id="r0", tier="fine", input_tokens=400)
        await clients[1].settle([settled])  # settled by the other process than the one that reserved
        crashed = clients[0]
        crashed.stopping.set()
        tasks[2].cancel()  # the holder dies without returning its leases
        assert isinstance(await clients[1].reserve(work(100), 1000), Refused)  # the budget is held or spent
        started = time.monotonic()
        while isinstance(await clients[1].reserve(work(101), 1000), Refused):  # until the leases are reclaimed
            assert time.monotonic() - started < 20
            await asyncio.sleep(0.5)
        assert time.monotonic() - started >= 0.5  # lease expiry (1 s) + grace (1 s), from the last grant
    finally:
        for x in [*owners, *clients]:
            x.stopping.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.stop()


def test_an_owner_whose_log_the_broker_lost_answers_the_requests_of_the_new_log():
    """A restarted broker without its data hands the owner a new log of the partition from offset 0. Requests
    there sit below the offset the owner had answered up to on the old log, and the old log's grants (the whole
    budget held) are gone with it: the owner starts afresh on the partition and answers them."""
    owner = BudgetOwner("", "lt", book(), send=None, lease_s=60.0, grace_s=1.0)
    owner.own(0, answer_from=2)  # assigned with the group's offset 2 committed: requests before it were answered

    def ask(holder: str, request: str, tokens: int) -> bytes:
        return BudgetEvent(
            kind="lease", key="tenant:acme@day", holder=holder, request=request, tokens=tokens, ts=time.time()
        ).dumps()

    old = consumed(name("budget"), [ask("a", "q0", 5), ask("a", "q1", 5), ask("a", "q2", HARD), ask("b", "q3", 1000)])
    assert owner.handle(owner.owners[0], 0, old[0]) == []  # answered before
    (_, _, held_all), _ = owner.handle(owner.owners[0], 0, old[2])
    assert held_all.tokens == HARD
    (_, _, refused), _ = owner.handle(owner.owners[0], 0, old[3])
    assert refused.tokens == 0  # the budget is held in a's lease

    owner.log_restarted(TopicPartition(name("budget"), 0))
    new = consumed(name("budget"), [ask("b", "q4", 1000)])  # offset 0, below the old log's answered offset
    (_, _, granted), (topic, _, to_holder) = owner.handle(owner.owners[0], 0, new[0])
    assert granted.tokens == 1000 and topic == name("leases") and to_holder.request == "q4"
    owner.log_restarted(TopicPartition(name("budget"), 3))  # a partition it does not own stays unowned
    assert set(owner.owners) == {0}


async def test_a_lease_request_lost_with_the_leases_log_is_sent_again_within_the_reservations_wait():
    """A top-up asked just before the broker stopped is never answered. A reservation waiting on it asks again
    once the lease client sees the leases log restart, and is admitted; before, it waited out wait_s and was
    refused."""
    owner, sent = LeaseOwner(lambda key: (HARD, "day"), 60.0, 1.0), []

    def answer(request: BudgetEvent) -> None:
        client.on_grant(owner.grant(request, time.time()))

    async def send(topic, values):
        for _, value in values:
            sent.append(request := BudgetEvent.loads(value))
            if len(sent) > 1:  # the first is lost with the broker
                asyncio.get_running_loop().call_later(0.05, answer, request)

    client = LeaseClient("", "lt", 4, book(), send, share=0.25, lease_s=60.0, wait_s=5.0)
    started = time.monotonic()
    reserving = asyncio.create_task(client.reserve(work(1), 1000))
    await wait_for(lambda: len(sent) == 1)
    await asyncio.sleep(0.2)
    assert not reserving.done()
    client.log_restarted(TopicPartition(name("leases"), 0))
    hold = await reserving
    assert isinstance(hold, LeaseHold) and time.monotonic() - started < 2.0
    assert len(sent) == 2 and sent[0].request != sent[1].request
    assert client.asking == {} and client.waiting == {}
