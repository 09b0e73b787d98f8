"""The Sender against the real broker: one Outbox, every kind of record on its topic, keyed and partitioned as
the stages key their topics, acknowledged when deliver returns."""

import asyncio
import time
import uuid

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.partitioner import DefaultPartitioner

from infra.broker import create_topics
from schemas.records import Alert, Chunk, Decision, Rejection, Request, UsageBatch, UsageEvent, Work, WorkBatch
from schemas.topics import name
from streams.core.inflight import IN_FLIGHT
from streams.core.outbox import Outbox
from streams.idempotency.requests import admitted_record, decided_record
from streams.runtime.partitioning import partition_for
from streams.runtime.sender import Sender
from streams.security import signing
from streams.usage.events import usage_event
from tests.conftest import fresh_topic


async def read(bootstrap: str, topics: list[str], count: int, key: str = "") -> list:
    """`count` records of `topics` (those keyed `key` when given, read until the topics are idle)."""
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    got = []
    try:
        while len(got) < count:
            polled = await consumer.getmany(timeout_ms=2000)
            if key and not polled:
                break
            for tp, msgs in polled.items():
                got += [(tp.topic, tp.partition, m) for m in msgs if not key or m.key == key.encode()]
    finally:
        await consumer.stop()
    return got


async def test_decisions_go_one_record_batch_per_partition_with_keys_and_headers(broker):
    bootstrap = await fresh_topic(broker, name("decisions"), 4)
    sender = Sender(bootstrap, 4)
    await sender.start()
    await sender.deliver(
        Outbox(decisions=[(Decision(request_id=f"r{i}", tier="rules"), {"x-tier": "rules"}) for i in range(200)])
    )
    await sender.stop()
    got = [
        (p, m.key.decode(), Decision.loads(m.value).request_id, dict(m.headers))
        for _, p, m in await read(bootstrap, [name("decisions")], 200)
    ]
    assert sorted(key for _, key, _, _ in got) == sorted(f"r{i}" for i in range(200))
    assert all(
        p == partition_for(key, 4) and rid == key and headers == {"x-tier": b"rules"} for p, key, rid, headers in got
    )


async def test_one_outbox_delivers_work_usage_review_dead_letters_alerts_and_records(broker):
    bootstrap = broker.url.removeprefix("kafka://")
    wanted = ["score", "usage", "review", "rejected", "alerts", "batch_results"]
    await create_topics(bootstrap, [name(short) for short in wanted], 4)
    rid = f"r-{uuid.uuid4().hex[:8]}"  # the session's broker is shared: this test's records carry their own id
    request = Request(request_id=rid, tenant="acme", service="s", decision_type="ranking", state="x")
    event = UsageEvent(
        event_id=f"{rid}:ingest",
        request_id=rid,
        ts=1.0,
        tenant="acme",
        service="s",
        business_line="",
        session_id="",
        user_id="",
        decision_type="ranking",
        stage="ingest",
        stack="acme;s",
    )
    sender = Sender(bootstrap, 4)
    await sender.start()
    await sender.deliver(
        Outbox(
            review=[Decision(request_id=rid, tier="fine")],
            usage=[event],
            work={"score": [Work(request=request, admitted_at=0.0, model="gpt-4o-mini", cache_key=rid)]},
            dead_letters=[
                Rejection(reason="bad_json", detail="d", stage="ingest", original="{", ts=1.0, request_id=rid)
            ],
            alerts=[Alert(rule="budget_hard", severity="page", scope=rid, message="m", value=2.0, threshold=1.0)],
            records=[("batch_results", rid.encode(), b'{"job": "%s"}' % rid.encode())],
        )
    )
    await sender.stop()
    got = {}
    consumer = AIOKafkaConsumer(
        *[name(s) for s in wanted], bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + 30
        while len(got) < len(wanted) and time.monotonic() < deadline:
            for tp, msgs in (await consumer.getmany(timeout_ms=1000)).items():
                got.update((tp.topic, (tp.partition, m)) for m in msgs if rid.encode() in (m.value or b""))
    finally:
        await consumer.stop()
    assert set(got) == {name(s) for s in wanted}
    partition, message = got[name("score")]
    assert partition == partition_for(rid, 4) and WorkBatch.loads(message.value).items[0].request.request_id == rid
    assert UsageBatch.loads(got[name("usage")][1].value).events[0].event_id == f"{rid}:ingest"
    assert got[name("review")][1].key == rid.encode() and got[name("rejected")][1].key == rid.encode()
    assert Rejection.loads(got[name("rejected")][1].value).reason == "bad_json"
    assert got[name("alerts")][1].key == rid.encode()
    assert got[name("batch_results")][1].value == b'{"job": "%s"}' % rid.encode()
    assert signing.trusted(got[name("usage")][1])  # signed: only Jev writes usage
    assert all(signing.HEADER not in dict(got[name(s)][1].headers) for s in ("review", "rejected", "batch_results"))


async def test_requests_seen_records_keep_kafkas_partition_per_key_in_order_and_signed(broker):
    """The requests-seen log is compacted per key: its records go one batch per partition, each on the partition
    Kafka's default partitioner (murmur2, aiokafka's send()) gives its key, as they always went; a request's
    admitted record before its decided one."""
    bootstrap = await fresh_topic(broker, name("requests_seen"), 4)
    rids = [f"seen-{uuid.uuid4().hex[:8]}-{i}" for i in range(40)]
    records = [admitted_record("acme", rid, b"{}") for rid in rids] + [
        decided_record("acme", Decision(request_id=rid, tier="rules")) for rid in rids
    ]
    sender = Sender(bootstrap, 4)
    await sender.start()
    await sender.deliver(Outbox(records=records))
    await sender.stop()
    got = await read(bootstrap, [name("requests_seen")], len(records))
    default = DefaultPartitioner()
    assert sorted((p, m.key, m.value) for _, p, m in got) == sorted(
        (default(key, [0, 1, 2, 3], [0, 1, 2, 3]), key, value) for _, key, value in records
    )
    assert all(signing.trusted(m) for _, _, m in got)
    kinds = {}
    for _, _, m in got:
        kinds.setdefault(m.key, []).append("decision" in orjson.loads(m.value))
    assert all(order == [False, True] for order in kinds.values())


class Ordered(Sender):
    """The real Sender, noting which kinds of record each send carried, in order."""

    def __init__(self, *args):
        super().__init__(*args)
        self.sends: list[list[str]] = []

    async def send(self, outbox):
        self.sends.append([kind for kind in ("chunks", "decisions") if getattr(outbox, kind)])
        return await super().send(outbox)


async def test_chunks_are_acknowledged_before_the_decisions_and_keyed_as_they_are(broker):
    bootstrap = broker.url.removeprefix("kafka://")
    await create_topics(bootstrap, [name("chunks"), name("decisions")], 4)
    rid = f"r-{uuid.uuid4().hex[:8]}"
    chunks = [
        Chunk(
            request_id=rid,
            seq=i,
            text=f"piece {i} ",
            tokens=2,
            tokens_so_far=2 * (i + 1),
            progress=25 * (i + 1),
            final=i == 3,
        )
        for i in range(4)
    ]
    sender = Ordered(bootstrap, 4)
    await sender.start()
    await sender.deliver(Outbox(decisions=[(Decision(request_id=rid, tier="llm"), {})], chunks=chunks))
    await sender.stop()
    assert sender.sends == [["chunks"], ["decisions"]]  # the decision is sent once every chunk is acknowledged
    got = [(p, m) for topic, p, m in await read(bootstrap, [name("chunks")], 4, rid)]
    assert [Chunk.loads(m.value).seq for _, m in got] == [0, 1, 2, 3]
    assert all(p == partition_for(rid, 4) and m.key == rid.encode() for p, m in got)


async def test_requests_sent_on_for_work_hold_until_their_decision_or_dead_letter_is_sent(broker):
    """What the owner's query sandboxes yield to (streams.core.inflight): work sent on holds, shadow twins do not."""
    bootstrap = broker.url.removeprefix("kafka://")
    await create_topics(bootstrap, [name(s) for s in ("score", "shadow", "decisions", "rejected")], 4)
    rid = f"in-flight-{uuid.uuid4().hex[:8]}"
    ids = [f"{rid}-{i}" for i in range(3)]
    works = [
        Work(
            request=Request(request_id=i, tenant="acme", service="s", decision_type="ranking", state="x"),
            admitted_at=0.0,
            model="m",
            cache_key=i,
        )
        for i in ids
    ]
    sender = Sender(bootstrap, 4)
    await sender.start()
    try:
        await sender.deliver(Outbox(work={"score": works[:2], "shadow": works[2:]}))
        assert set(ids[:2]) <= set(IN_FLIGHT.until) and ids[2] not in IN_FLIGHT.until
        await sender.deliver(
            Outbox(
                decisions=[(Decision(request_id=ids[0], tier="fine"), {})],
                dead_letters=[
                    Rejection(reason="over_budget", detail="d", stage="ingest", original="{", ts=1.0, request_id=ids[1])
                ],
            )
        )
        assert not set(ids) & set(IN_FLIGHT.until)
    finally:
        IN_FLIGHT.release(ids)
        await sender.stop()


class Watched:
    """A started producer, noting for each record it queues whether every usage record queued before it was
    already acknowledged by the broker: what a process SIGKILLed right after queueing it would have left."""

    def __init__(self, producer, usage_topic: str):
        self.producer, self.usage_topic = producer, usage_topic
        self.usage: list[asyncio.Future] = []
        self.queued: list[tuple[str, bool]] = []  # (topic, its usage was acknowledged when this was queued)

    def __getattr__(self, attr):
        return getattr(self.producer, attr)

    def note(self, topic: str, future: asyncio.Future) -> asyncio.Future:
        if topic == self.usage_topic:
            self.usage.append(future)
        else:
            self.queued.append((topic, bool(self.usage) and all(f.done() for f in self.usage)))
        return future

    async def send(self, topic, *args, **kwargs):
        return self.note(topic, await self.producer.send(topic, *args, **kwargs))

    async def send_batch(self, batch, topic, **kwargs):
        return self.note(topic, await self.producer.send_batch(batch, topic, **kwargs))


async def test_a_requests_usage_is_acknowledged_before_anything_that_says_it_was_handled(broker):
    """A stage process SIGKILLed while delivering must never leave a request's requests-seen record, work or
    decision on the broker without its usage: the redelivery finds the request decided, sends the first decision
    again and meters nothing (test_chaos: 150 of 150 decided, 13 of them without usage rows). Queued in one go,
    the requests-seen record went out first and could land a round trip or more before the usage (the Sender
    waits for a partition's pending batch to drain before queueing a decision batch behind it)."""
    bootstrap = broker.url.removeprefix("kafka://")
    topics = {short: name(short) for short in ("usage", "requests_seen", "decisions", "score")}
    await create_topics(bootstrap, list(topics.values()), 4)
    rid = f"metered-{uuid.uuid4().hex[:8]}"
    request = Request(request_id=rid, tenant="acme", service="s", decision_type="ranking", state="x")
    decision = Decision(request_id=rid, tier="fine")
    sender = Sender(bootstrap, 4)
    await sender.start()
    watched = sender.producer = Watched(sender.producer, topics["usage"])
    try:
        await sender.deliver(
            Outbox(
                decisions=[(decision, {})],
                usage=[usage_event(request, "ingest"), usage_event(request, "postprocess")],
                work={"score": [Work(request=request, admitted_at=0.0, model="m", cache_key=rid)]},
                records=[admitted_record("acme", rid, b"{}"), decided_record("acme", decision)],
            )
        )
    finally:
        IN_FLIGHT.release([rid])
        await sender.stop()
    assert {topic for topic, _ in watched.queued} == {topics["requests_seen"], topics["decisions"], topics["score"]}
    assert all(acknowledged for _, acknowledged in watched.queued), watched.queued
    consumer = AIOKafkaConsumer(
        topics["usage"], bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    events, deadline = [], time.monotonic() + 30
    try:
        while len(events) < 2 and time.monotonic() < deadline:
            for msgs in (await consumer.getmany(timeout_ms=1000)).values():
                events += [e for m in msgs for e in UsageBatch.loads(m.value).events if e.request_id == rid]
    finally:
        await consumer.stop()
    assert sorted(e.stage for e in events) == ["ingest", "postprocess"]


async def test_replies_reach_their_tenants_topics_and_a_rejection_there_drops_the_original(broker):
    """Decisions, chunks, review, rejections and batch replies of two tenants (one of them Chinese): each tenant's
    reply topics hold its own records only, created on first use; the all-tenant topics hold everyone's, and a
    rejection's original request stays there."""
    from streams.core.deadletter import dead_letter
    from streams.core.tenants import reply_topic

    bootstrap = broker.url.removeprefix("kafka://")
    await create_topics(bootstrap, [name("decisions"), name("chunks"), name("review"), name("rejected")], 4)
    run = uuid.uuid4().hex[:6]
    tenants = {"a": f"acme{run}", "z": f"客服{run}"}
    outbox = Outbox()
    for who, tenant in tenants.items():
        outbox.decisions.append((Decision(request_id=f"{who}-d", tier="rules", tenant=tenant), {}))
        outbox.review.append(Decision(request_id=f"{who}-v", tier="llm", tenant=tenant))
        outbox.chunks.append(
            Chunk(request_id=f"{who}-c", seq=0, text="你好", tokens=1, tokens_so_far=1, progress=100, tenant=tenant)
        )
        outbox.dead_letters.append(dead_letter("over_budget", "why", "ingest", b"x" * 1000, f"{who}-r", tenant=tenant))
        outbox.replies.append(("batch_results", tenant, b"job", b'{"job": "%s"}' % who.encode()))
    outbox.dead_letters.append(dead_letter("bad_json", "not JSON", "ingest", b"{", "nobody"))  # no tenant known
    sender = Sender(bootstrap, 4)
    await sender.start()
    await sender.deliver(outbox)
    await sender.stop()
    for who, tenant in tenants.items():
        got = await read(bootstrap, [reply_topic(k, tenant) for k in ("decisions", "chunks", "review", "rejected")], 4)
        keys = sorted(m.key.decode() for _, _, m in got)
        assert keys == sorted(f"{who}-{k}" for k in "dcvr")
        rejection = next(Rejection.loads(m.value) for t, _, m in got if t == reply_topic("rejected", tenant))
        assert rejection.original == "" and rejection.reason == "over_budget" and rejection.detail == "why"
        batch = await read(bootstrap, [reply_topic("batch_results", tenant)], 1)
        assert [orjson.loads(m.value)["job"] for _, _, m in batch] == [who]
    internal = await read(bootstrap, [name("rejected")], 3, "a-r")
    assert len(Rejection.loads(internal[0][2].value).original) == 1000  # the operators keep the original
