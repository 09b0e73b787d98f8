"""Hard budgets on Kafka: the owner of each budget partition (`BudgetOwner`) and a stage process's lease client
(`LeaseClient`). The logic is pure (streams.budgets.lease_owner, lease_holder); this module moves its events.

The owners share the consumer group `<app_id>-budget`, so each budget key has one owner at a time, which folds its
partition from the start and answers the lease requests at or past the group's committed offset. Grants go back
on the budget topic (part of the state) and to the holder on the leases topic; sends are awaited before commits.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError

from schemas.records import BudgetEvent, Work
from schemas.topics import name
from streams.budgets.book import BudgetBook, Refused, request_scopes
from streams.budgets.lease_holder import LeaseHold, LeaseHolder
from streams.budgets.lease_owner import LeaseOwner, settle_id
from streams.idempotency.requests import reservation_key
from streams.runtime.consumer import OwnLoop, group_consumer
from streams.runtime.kafka_tuning import tune
from streams.runtime.partitioning import partition_for
from streams.security import signing

log = logging.getLogger("jev.leases")

Send = Callable[[str, list[tuple[int | None, bytes]]], Awaitable[None]]  # topic, [(partition, value)]


def hard_limits(book: BudgetBook, scopes: list[str] | None = None) -> dict[str, int]:
    """Budget key -> hard token limit, of the budgets covering `scopes` (every budget when None)."""
    budgets = book.budgets.values() if scopes is None else (b for s in scopes for b in book.by_scope.get(s, ()))
    return {b.key: b.hard_tokens for b in budgets if b.hard_tokens is not None}


class BudgetOwner:
    """The owner side: a consumer of the budget topic in group `<app_id>-budget`, one LeaseOwner per partition."""

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        book: BudgetBook,
        send: Send,
        lease_s: float,
        grace_s: float,
        poll_ms: int = 20,
    ):
        self.bootstrap, self.group, self.book, self.send = bootstrap, f"{app_id}-budget", book, send
        self.lease_s, self.grace_s, self.poll_ms = lease_s, grace_s, poll_ms
        self.owners: dict[int, LeaseOwner] = {}
        self.answer_from: dict[int, int] = {}  # partition -> first offset whose requests are still to answer
        self.partitions = 0
        self.stopping = asyncio.Event()
        self.main: asyncio.AbstractEventLoop | None = None  # the loop the Sender (`send`) lives on

    def limits(self, key: str):
        b = self.book.budgets.get(key)
        return (b.hard_tokens, b.period) if b is not None and b.hard_tokens is not None else None

    async def run(self) -> None:
        """Own budget partitions until stopped. The consumer runs on a loop of its own
        (streams.runtime.consumer.OwnLoop), so its heartbeats go out while the process's loop is busy (a member dropped
        from the group makes every owner read its partitions again); sends go to the Sender on the process's loop."""
        self.main = asyncio.get_running_loop()
        own = OwnLoop(f"jev-{self.group}")
        try:
            await own.call(self.own_partitions)
        finally:
            self.stopping.set()
            await asyncio.to_thread(own.close)

    async def own_partitions(self) -> None:
        consumer = group_consumer(self.bootstrap, self.group, self.poll_ms)
        owner = self

        class Rebalance(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                for tp in revoked:
                    owner.owners.pop(tp.partition, None)

            async def on_partitions_assigned(self, assigned):
                for tp in assigned:
                    owner.own(tp.partition, await consumer.committed(tp) or 0)
                if assigned:  # a member given no partition (more members than partitions) has none to read
                    await consumer.seek_to_beginning(*assigned)

        consumer.subscribe([name("budget")], listener=Rebalance())
        await consumer.start()
        tune(consumer, self.log_restarted)
        self.partitions = len(consumer.partitions_for_topic(name("budget")) or ()) or 1
        last_reclaim = 0.0
        try:
            while not self.stopping.is_set():
                polled = await consumer.getmany(timeout_ms=200, max_records=2000)
                sends, offsets = [], {}
                for tp, msgs in polled.items():
                    lease_owner = self.owners.get(tp.partition)
                    if lease_owner is None:
                        continue
                    for msg in msgs:
                        sends += self.handle(lease_owner, tp.partition, msg)
                    offsets[tp] = msgs[-1].offset + 1
                if time.time() - last_reclaim > 1.0:
                    last_reclaim = time.time()
                    for p, lease_owner in self.owners.items():
                        reclaims = lease_owner.reclaims(last_reclaim)
                        sends += [(name("budget"), p, r) for r in reclaims]
                if sends:
                    await self.deliver(sends)
                if offsets:
                    committable = {tp: o for tp, o in offsets.items() if o >= self.answer_from.get(tp.partition, 0)}
                    try:
                        if committable:
                            await consumer.commit(committable)
                    except KafkaError as exc:
                        log.warning("budget offsets not committed (%s); requests may be answered again", exc)
        finally:
            await consumer.stop()

    def own(self, partition: int, answer_from: int) -> None:
        """A fresh owner of `partition`, which folds its log from the start and answers the lease requests at or
        past `answer_from` (those before it were answered before)."""
        self.owners[partition] = LeaseOwner(self.limits, self.lease_s, self.grace_s)
        self.answer_from[partition] = answer_from

    def log_restarted(self, tp) -> None:
        """The broker restarted without the partition's log (the consumer reads it again from its start): the
        state folded from the old log, and the offset its answered requests ended at, belong to a log that is
        gone. Kept, they would leave every new lease request below that offset unanswered until the group
        rebalanced (seconds; each waiting reservation is refused after the lease client's wait)."""
        if tp.partition in self.owners:
            self.own(tp.partition, 0)

    def handle(self, lease_owner: LeaseOwner, partition: int, msg) -> list[tuple[str, int | None, BudgetEvent]]:
        if not signing.trusted(msg):
            return []
        try:
            event = BudgetEvent.loads(msg.value)
        except Exception as exc:
            log.warning("skipping malformed budget event at offset %s: %s", msg.offset, exc)
            return []
        if event.kind != "lease":
            lease_owner.apply(event)
            return []
        if msg.offset < self.answer_from.get(partition, 0):
            return []
        grant = lease_owner.grant(event, time.time())
        if grant is None:
            return []
        return [(name("budget"), partition, grant), (name("leases"), None, grant)]

    async def deliver(self, sends: list[tuple[str, int | None, BudgetEvent]]) -> None:
        by_topic: dict[str, list] = {}
        for topic, partition, event in sends:
            by_topic.setdefault(topic, []).append((partition, event.dumps()))

        async def send_all() -> None:
            await asyncio.gather(*(self.send(topic, values) for topic, values in by_topic.items()))

        if self.main is None or self.main is asyncio.get_running_loop():
            await send_all()
        else:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(send_all(), self.main))


class LeaseClient:
    """The holder side in a stage process: reserve against leases, top them up ahead of need, return what is
    unused, and settle decided works wherever they complete."""

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        partitions: int,
        book: BudgetBook,
        send: Send,
        share: float,
        lease_s: float,
        wait_s: float = 5.0,
    ):
        self.bootstrap, self.app_id, self.partitions, self.book, self.send = bootstrap, app_id, partitions, book, send
        self.id = f"{app_id}-{uuid.uuid4().hex[:12]}"
        self.holder = LeaseHolder(self.id, share, lease_s)
        self.wait_s = wait_s
        self.waiting: dict[str, asyncio.Future] = {}
        self.asking: dict[str, str] = {}  # budget key -> the lease request in flight for it
        self.granted: set[str] = set()  # lease requests already answered (a grant may arrive twice)
        self.asked: set[str] = set()  # every lease request this holder made
        self.returning: list = []  # (key, Held) replaced by a new lease before being returned
        self.stopping = asyncio.Event()

    async def ask(self, key: str, lease_id: str, tokens: int) -> asyncio.Future:
        request = uuid.uuid4().hex
        future = asyncio.get_running_loop().create_future()
        self.waiting[request] = future
        self.asking[key] = request
        self.asked.add(request)
        event = BudgetEvent(
            kind="lease", key=key, holder=self.id, lease_id=lease_id, request=request, tokens=tokens, ts=time.time()
        )
        await self.send(name("budget"), [(partition_for(key, self.partitions), event.dumps())])
        return future

    async def reserve(self, work: Work, tokens: int) -> LeaseHold | Refused | None:
        """Hold `tokens` (the request's worst case: streams.budgets.reserve) against the lease of every hard budget
        covering it (None when none does), asking the owners for more when a lease lacks it; Refused when they
        cannot grant enough."""
        limits = hard_limits(self.book, request_scopes(work.request))
        if not limits:
            return None
        await self.give_back(self.holder.lowered(limits))  # taken under a higher limit: returned ahead of any ask
        deadline = time.monotonic() + self.wait_s
        while True:
            now = time.time()
            held = self.holder.reserve(list(limits), tokens, now)
            if isinstance(held, LeaseHold):
                return held
            asks = []
            for key in held:  # one request in flight per key: concurrent reservations wait on the same answer
                request = self.asking.get(key)
                if request is None or request not in self.waiting:
                    current = self.holder.usable(key, now)
                    balance = current.balance if current else 0
                    await self.ask(
                        key, current.lease_id if current else "", self.holder.slice(limits[key], tokens - balance)
                    )
                    request = self.asking[key]
                asks.append(asyncio.shield(self.waiting[request]))
            try:
                granted = await asyncio.wait_for(asyncio.gather(*asks), max(0.0, deadline - time.monotonic()))
                if None in granted:  # the log restarted: asked again
                    continue
            except TimeoutError:
                log.warning("no lease answer within %.1f s for %s", self.wait_s, held)
                for key in held:  # the next reservation asks anew rather than waiting on an answer that is lost
                    self.waiting.pop(self.asking.pop(key, ""), None)
                break
            if not all(granted):  # an owner granted nothing more: spent, or held in other processes' leases
                held = self.holder.reserve(list(limits), tokens, time.time())
                if isinstance(held, LeaseHold):
                    return held
                break
        b = self.book.budgets[held[0]]
        return Refused(
            f"budget {b.key} hard_tokens {b.hard_tokens}: the owner granted no lease with {tokens} tokens "
            f"left (spent, or held by other stage processes' leases)",
            b.key,
            b.policy,
            b.degrade_to,
        )

    def hold_now(self, work: Work, tokens: int) -> LeaseHold | Refused | None:
        """`tokens` held against the leases this process has now for the hard budgets covering `work` (None when
        none does), asking no owner for more: for optional work not worth a wait (an L3 pre-answer); Refused
        when a lease lacks them."""
        limits = hard_limits(self.book, request_scopes(work.request))
        if not limits:
            return None
        held = self.holder.reserve(list(limits), tokens, time.time())
        if isinstance(held, LeaseHold):
            return held
        b = self.book.budgets[held[0]]
        return Refused(
            f"budget {b.key} hard_tokens {b.hard_tokens}: this process's lease lacks {tokens} tokens",
            b.key,
            b.policy,
            b.degrade_to,
        )

    def release(self, hold: LeaseHold) -> None:
        """A hold the request will not use (another budget refused it): back to the local leases."""
        for key, lease_id in hold.leases.items():
            held = self.holder.leases.get(key)
            if held is not None and held.lease_id == lease_id:
                held.balance += hold.tokens

    async def settle(self, works: list[Work]) -> None:
        """Settle decided works against the leases they were reserved on, sent now (offline callers, benches)."""
        values: list[tuple[int | None, bytes]] = [*self.settlements(works)]
        if values:
            await self.send(name("budget"), values)

    def settlements(self, works: list[Work]) -> list[tuple[int, bytes]]:
        """The settle events of decided works, one per lease they were reserved on, as (partition, value) of the
        budget topic: a stage puts them in its Outbox (Outbox.placed), so they go out with its decisions."""
        totals: dict[tuple[str, str], list] = {}
        for work in works:
            if not work.budget_holds or work.decision is None:
                continue
            actual = work.decision.input_tokens + work.decision.output_tokens
            for key, lease_id in work.budget_holds.items():
                t = totals.setdefault((key, lease_id), [0, 0, []])
                t[0] += work.budget_tokens
                t[1] += actual
                t[2].append(reservation_key(work.request.tenant, work.request.request_id))
        events = [
            BudgetEvent(
                kind="settle",
                key=key,
                lease_id=lease_id,
                holder=self.id,
                request=settle_id(key, lease_id, settled),
                reserved=reserved,
                actual=actual,
                window=self.window(key),
                ts=time.time(),
            )
            for (key, lease_id), (reserved, actual, settled) in totals.items()
        ]
        return [(partition_for(e.key, self.partitions), e.dumps()) for e in events]

    def window(self, key: str) -> str:
        from streams.budgets.lease_owner import window_of

        b = self.book.budgets.get(key)
        return window_of(b.period if b else "day", time.time())

    def on_grant(self, event: BudgetEvent) -> None:
        """A grant from the owner: taken once, and only when it answers a lease request this holder made."""
        if event.holder != self.id or event.request in self.granted or event.request not in self.asked:
            return
        self.granted.add(event.request)
        limit = hard_limits(self.book).get(event.key, 0)
        replaced = self.holder.on_grant(event.key, event.lease_id, event.window, event.tokens, event.expires, limit)
        if replaced is not None:
            self.returning.append((event.key, replaced))
        if self.asking.get(event.key) == event.request:
            del self.asking[event.key]
        future = self.waiting.pop(event.request, None)
        if future is not None and not future.done():
            future.set_result(event.tokens)

    def log_restarted(self, tp) -> None:
        """The broker restarted without the leases log: requests in flight, or their grants, may be lost with it.
        Reservations waiting on one ask again (their wait goes on), and so does the next top-up; kept, each
        waited out its whole wait and was refused."""
        for request in self.asking.values():
            future = self.waiting.pop(request, None)
            if future is not None and not future.done():
                future.set_result(None)
        self.asking.clear()

    async def run(self) -> None:
        """Follow grants; every 0.2 s top up low or expiring leases and return expired ones' balance. Every
        partition is read, from its start, without a consumer group: grants are for this process alone, and a
        group of its own (one per process start) only added rebalances and commits: after a broker restarted
        without its data, the group rejoined while grants were being written, a grant was never read, and the
        reservation waiting for it was refused."""
        consumer = AIOKafkaConsumer(
            name("leases"),
            bootstrap_servers=self.bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=20,
        )
        await consumer.start()
        tune(consumer, self.log_restarted)
        try:
            while not self.stopping.is_set():
                for msgs in (await consumer.getmany(timeout_ms=200)).values():
                    for msg in msgs:
                        if not signing.trusted(msg):
                            continue
                        try:
                            self.on_grant(BudgetEvent.loads(msg.value))
                        except Exception as exc:
                            log.warning("skipping malformed lease grant: %s", exc)
                await self.renew()
        finally:
            await self.return_all()
            await consumer.stop()

    async def renew(self) -> None:
        now, limits = time.time(), hard_limits(self.book)
        self.returning += self.holder.lowered(limits)
        for key, (lease_id, tokens) in self.holder.wanted(limits, now).items():
            if key not in self.asking and tokens > 0:
                await self.ask(key, lease_id, tokens)
        gone, self.returning = self.holder.expired(now) + self.returning, []
        await self.give_back(gone)

    async def give_back(self, leases) -> None:
        events = [
            BudgetEvent(
                kind="return",
                key=key,
                lease_id=h.lease_id,
                holder=self.id,
                request=uuid.uuid4().hex,  # the owner counts each return once (a replay changes nothing)
                window=h.window,
                tokens=h.balance,
                ts=time.time(),
            )
            for key, h in leases
            if h.balance > 0
        ]
        if events:
            await self.send(name("budget"), [(partition_for(e.key, self.partitions), e.dumps()) for e in events])

    async def return_all(self) -> None:
        """On a clean stop: every lease's balance back to its owner at once."""
        leases = list(self.holder.leases.items())
        self.holder.leases.clear()
        try:
            await self.give_back(leases)
        except Exception as exc:  # the owner reclaims them after their expiry anyway
            log.warning("leases not returned at stop (%s); their owners reclaim them after expiry", exc)
