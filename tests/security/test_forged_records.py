"""A client with write access to the broker forges each kind of internal record Jev trusts: a switch, a switch
stamped in the year 2100, a budget raise, a lease grant, a negative settle, a first decision on requests-seen and
a usage event. Each is refused, counted in jev_forged_records_total{topic}, and the signed record beside it is
still taken. The records travel through the real local broker to the real followers."""

import asyncio
import dataclasses
import time

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import REGISTRY

from infra.broker import LocalBroker, create_topics
from schemas.records import BudgetEvent, Control, Decision, UsageBatch
from schemas.topics import name
from streams.budgets.book import BudgetBook
from streams.budgets.lease_owner import LeaseOwner
from streams.core.switches import Controls, switch_record
from streams.idempotency.requests import REDELIVERY, Requests, admitted_record, decided_record
from streams.runtime.control import ControlReader, publish, save_kept
from streams.runtime.leases import BudgetOwner, LeaseClient
from streams.runtime.usage_sink import read_envelopes
from streams.security import signing
from streams.usage.events import usage_event
from tests.conftest import consumed
from tests.streams.runtime.test_control import wait_for

YEAR_2100 = 4_102_444_800.0


def forged_count(topic: str) -> float:
    return REGISTRY.get_sample_value("jev_forged_records_total", {"topic": name(topic)}) or 0.0


@pytest.fixture
def keyed(settings):
    """This process signs with a key of its own data directory, as a stage process does."""
    return signing.configure(settings)


async def produce(bootstrap: str, topic: str, values: list[bytes], signed: bool = False, partition: int = 0):
    """Write raw records as any client could (`signed`: as Jev's own processes do)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(
                name(topic), value, partition=partition, headers=signing.headers(name(topic), value) if signed else None
            )
    finally:
        await producer.stop()


def with_headers(message, headers):
    return dataclasses.replace(message, headers=tuple(headers))


@pytest.fixture
def bootstrap():
    """A broker of this test's own (its topics hold only what the test wrote)."""
    with LocalBroker() as broker:
        yield broker.url.removeprefix("kafka://")


async def follow_controls(bootstrap: str, controls: Controls, until) -> ControlReader:
    reader = ControlReader(bootstrap, controls, poll_ms=100)
    task = asyncio.create_task(reader.run())
    await wait_for(until, 15)
    reader.stopping.set()
    await task
    return reader


async def test_a_forged_switch_and_budget_raise_are_refused_and_a_signed_switch_is_taken(bootstrap, keyed):
    await create_topics(bootstrap, [name("control")], 1)
    before = forged_count("control")
    await produce(
        bootstrap,
        "control",
        [
            Control(kind="switch", key="ingest.budgets", value=False, ts=time.time()).dumps(),
            Control(kind="budget", key="tenant:wayne", value={"hard_tokens": 10**12}, ts=time.time()).dumps(),
        ],
    )
    await publish(
        bootstrap,
        [
            switch_record("cache.l2", False),
            Control(kind="budget", key="tenant:wayne", value={"hard_tokens": 1}, ts=time.time()),
        ],
    )
    controls, book = Controls(), BudgetBook()
    controls.listeners.append(lambda c: book.apply(c) if c.kind == "budget" else None)
    await follow_controls(
        bootstrap, controls, lambda: not controls.on("cache.l2") and "tenant:wayne@day" in book.budgets
    )
    assert controls.on("ingest.budgets")  # the forged switch was not applied
    assert not controls.on("cache.l2")  # the signed one was
    assert book.budgets["tenant:wayne@day"].hard_tokens == 1  # the raise to 10^12 was refused
    assert forged_count("control") - before == 2


async def test_a_switch_stamped_in_2100_neither_outlives_the_operator_nor_is_republished(bootstrap, keyed, tmp_path):
    """Even signed (a skewed clock, a stolen key), a record from the future is refused: the operator's later `on`
    is in effect and the stage process keeps and republishes only what it took."""
    await create_topics(bootstrap, [name("control")], 1)
    before = forged_count("control")
    await produce(
        bootstrap,
        "control",
        [Control(kind="switch", key="ingest.budgets", value=False, ts=YEAR_2100).dumps()],
        signed=True,
    )
    await produce(
        bootstrap, "control", [Control(kind="switch", key="ingest.budgets", value=False, ts=YEAR_2100).dumps()]
    )  # and one unsigned
    await publish(bootstrap, [switch_record("ingest.budgets", True), switch_record("cache.l1", False)])
    kept = tmp_path / "control.json"
    save_kept(
        kept, {"switch:ingest.budgets": Control(kind="switch", key="ingest.budgets", value=False, ts=YEAR_2100)}
    )  # planted in a kept file too
    controls = Controls()
    reader = ControlReader(bootstrap, controls, poll_ms=100, keep=kept, check_s=0)
    task = asyncio.create_task(reader.run())
    assert await wait_for(lambda: not controls.on("cache.l1"), 15)
    await asyncio.sleep(1.0)  # the check against the topic runs once it is read
    reader.stopping.set()
    await task
    assert controls.on("ingest.budgets")
    assert all(c.ts < YEAR_2100 for c in reader.known.values())
    assert forged_count("control") - before == 3  # the kept one, the signed one, the unsigned one
    # a replayed older signed record does not undo a newer one either
    reader.apply(Control(kind="switch", key="ingest.budgets", value=False, ts=time.time() - 3600).dumps())
    assert controls.on("ingest.budgets")


async def test_a_forged_lease_grant_is_refused_and_the_owners_signed_grant_is_taken(bootstrap, keyed):
    await create_topics(bootstrap, [name("leases"), name("budget")], 1)
    before = forged_count("leases")
    sent = []

    async def send(topic, values):
        sent.extend(values)

    book = BudgetBook()
    book.apply(Control(kind="budget", key="tenant:wayne", value={"hard_tokens": 400}))
    client = LeaseClient(bootstrap, "forge", 1, book, send, share=0.25, lease_s=60.0)
    await client.ask("tenant:wayne@day", "", 100)
    asked = BudgetEvent.loads(sent[0][1])
    grant = dict(kind="grant", key="tenant:wayne@day", holder=client.id, window="w", expires=time.time() + 60)
    await produce(
        bootstrap, "leases", [BudgetEvent(**grant, request=asked.request, lease_id="forged", tokens=10**9).dumps()]
    )
    await produce(
        bootstrap,
        "leases",
        [BudgetEvent(**grant, request="never-asked", lease_id="other", tokens=10**9).dumps()],
        signed=True,
    )
    await produce(
        bootstrap,
        "leases",
        [BudgetEvent(**grant, request=asked.request, lease_id="real", tokens=100).dumps()],
        signed=True,
    )
    running = asyncio.create_task(client.run())
    assert await wait_for(lambda: "tenant:wayne@day" in client.holder.leases, 15)
    client.stopping.set()
    await running
    held = client.holder.leases.get("tenant:wayne@day")
    assert held is None or held.lease_id == "real"  # returned at stop, or still held: never the forged ones
    assert asked.request in client.granted and "never-asked" not in client.granted
    assert forged_count("leases") - before == 1


def test_a_negative_settle_is_refused_forged_or_signed(keyed):
    before = forged_count("budget")
    book = BudgetBook()
    book.apply(Control(kind="budget", key="tenant:wayne", value={"hard_tokens": 400}))
    owner = BudgetOwner("127.0.0.1:9", "forge", book, send=None, lease_s=60.0, grace_s=60.0)
    lease_owner = LeaseOwner(owner.limits, 60.0, 60.0)
    lease = lease_owner.grant(
        BudgetEvent(kind="lease", key="tenant:wayne", holder="h", request="r1", tokens=400), time.time()
    )
    settle = dict(kind="settle", key="tenant:wayne", holder="h", lease_id=lease.lease_id, window=lease.window)
    values = [
        BudgetEvent(**settle, reserved=0, actual=-(10**7)).dumps(),
        BudgetEvent(**settle, reserved=-(10**7), actual=0).dumps(),
        BudgetEvent(**settle, reserved=100, actual=60).dumps(),
    ]
    messages = consumed(name("budget"), values)  # signed, as Jev's Sender signs
    unsigned = with_headers(consumed(name("budget"), values[:1])[0], ())
    for message in (unsigned, *messages):
        owner.handle(lease_owner, 0, message)
    account = lease_owner.accounts["tenant:wayne"]
    assert account.used == 60  # only the valid settle counted
    assert account.leases[lease.lease_id].held == 300
    assert forged_count("budget") - before == 1


async def test_a_forged_first_decision_and_fingerprint_on_requests_seen_are_refused(bootstrap, keyed):
    from streams.idempotency.requests import NEW
    from streams.runtime.agents.ingest import RequestsSeenLog

    await create_topics(bootstrap, [name("requests_seen")], 1)
    before = forged_count("requests_seen")
    forged_decision = Decision(request_id="r-victim", action_id="FORGED", tier="rules")
    raw = orjson.dumps({"request_id": "r-victim", "tenant": "globex", "state": "s"})
    planted = [
        decided_record("globex", forged_decision)[2],
        admitted_record("globex", "r-target", b'{"other": "content"}')[2],
    ]
    await produce(bootstrap, "requests_seen", planted)
    _, _, genuine = decided_record("globex", Decision(request_id="r-done", action_id="A", tier="rules"))
    await produce(bootstrap, "requests_seen", [genuine], signed=True)
    requests = Requests()
    seen = RequestsSeenLog(bootstrap, requests, poll_ms=100)
    following = asyncio.create_task(seen.follow())
    await asyncio.wait_for(seen.caught_up.wait(), 30)
    seen.stopping.set()
    await following
    assert requests.check("globex", "r-victim", raw) == (NEW, None)  # decided for real, not answered FORGED
    assert requests.check("globex", "r-target", b'{"mine": 1}')[0] == NEW  # not a duplicate_request_id
    verdict, first = requests.check("globex", "r-done", b"{}")
    assert verdict == REDELIVERY and first.action_id == "A"  # the signed record is taken
    assert forged_count("requests_seen") - before == 2


def test_a_forged_usage_event_is_dead_lettered_and_a_signed_one_inserted(keyed):
    from schemas.records import Request

    request = Request.from_data(
        {"request_id": "r1", "tenant": "globex", "service": "s", "decision_type": "ranking", "state": "x"}
    )
    planted = UsageBatch(events=[usage_event(request, "score", model="gpt-4o-mini", input_tokens=4_000_000_000)])
    real = UsageBatch(events=[usage_event(request, "ingest", model="gpt-4o-mini", input_tokens=60)])
    before = forged_count("usage")
    signed_messages = consumed(name("usage"), [real.dumps(), planted.dumps()])
    messages = [
        signed_messages[0],
        with_headers(signed_messages[1], ()),  # unsigned
        with_headers(signed_messages[1], signed_messages[0].headers),
    ]  # copied
    events, rejected = read_envelopes(messages)
    assert [e.input_tokens for e in events] == [60]
    assert [r.reason for r in rejected] == ["forged_record", "forged_record"]
    assert "unsigned" in rejected[0].detail and "bad signature" in rejected[1].detail
    assert forged_count("usage") - before == 2
