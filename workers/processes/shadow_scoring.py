"""The scoring worker's shadow side: decides naive twins (streams.shadow.naive) only while no served batch
is being decided and never beside one (the two engines share their models: `Deciding`, served work first), so
shadow work holds a served decision back by the one twin being decided at most, never by the twins queued behind
it, and drops twins older than JEV_SHADOW_MAX_AGE_MS (the first work dropped under load). Decided twins go to the
scored topic on their cache-key partition (through the worker's Sender, like served work), where the stage process
pairs them with their served decisions; their tokens are metered as stage "shadow"; each dropped twin leaves a
usage row (shadow;dropped) so a sample can be accounted for."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from schemas.records import Rejection, Work
from schemas.topics import name
from streams.core.outbox import Outbox
from streams.runtime.consumer import BatchConsumer
from streams.shadow.naive import decide_naive, naive_engine
from streams.usage.events import usage_event

CHUNK = 4  # naive twins taken between two checks for served work (each decided alone, the lock taken per twin)


class Deciding:
    """The lock both engines decide under (they share the backends, whose tokenizers and caches are not safe in two
    threads at once: "Already borrowed"), served work first: a twin takes it only while no served batch holds it or
    waits for it, and holds it for one twin. Under load a checkout screening (300 ms deadline) had waited behind a
    chunk of twins decided under one hold (399 ms at load ~10) and fallen back; now it waits for the one twin in
    flight at most. `with deciding:` is the served side's; `with deciding.for_shadow():` a twin's."""

    def __init__(self):
        self.turn = threading.Condition()
        self.held = False
        self.served_waiting = 0

    def acquire(self, served: bool = True) -> None:
        with self.turn:
            self.served_waiting += served
            try:
                while self.held or (not served and self.served_waiting):
                    self.turn.wait()
            finally:
                self.served_waiting -= served
            self.held = True

    def release(self) -> None:
        with self.turn:
            self.held = False
            self.turn.notify_all()

    def locked(self) -> bool:
        return self.held

    def __enter__(self) -> Deciding:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    @contextlib.contextmanager
    def for_shadow(self):
        self.acquire(served=False)
        try:
            yield
        finally:
            self.release()


class ShadowScorer:
    def __init__(self, settings, engine, decode):
        """`decode(message)`: a WorkBatch, or the Rejection of an envelope that does not decode or Jev did not write."""
        self.settings, self.decode = settings, decode
        self.engine = naive_engine(engine)
        self.deciding = Deciding()  # held while either engine decides, served work first
        self.serving = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.decided = self.dropped = 0

    @contextlib.contextmanager
    def served_batch(self):
        """Wrap the deciding of a served micro-batch: shadow work waits while one runs."""
        self.serving += 1
        self.idle.clear()
        try:
            yield
        finally:
            self.serving -= 1
            if not self.serving:
                self.idle.set()

    def consumer(self, sender) -> BatchConsumer:
        s = self.settings
        return BatchConsumer(
            s.bootstrap,
            name("shadow"),
            s.shadow_group,
            self.handle,
            s.score_batch_max,
            s.score_batch_wait_ms,
            sender=sender,
        )

    async def handle(self, messages: list) -> Outbox:
        """One micro-batch of naive twins: the decided ones for `scored`, shadow usage (dropped twins
        included) and the dead letters of envelopes that do not decode."""
        out, works = Outbox(), []
        for msg in messages:
            batch = self.decode(msg)
            if isinstance(batch, Rejection):  # a poison message: dead-lettered like the score topic's
                out.dead_letters.append(batch)
                continue
            works.extend(batch.items)
        for i in range(0, len(works), CHUNK):
            await self.until_idle()
            fresh, dropped = self.drop_stale(works[i : i + CHUNK])
            out.usage += dropped
            if fresh:
                decided, usage = await asyncio.to_thread(self.decide, fresh)
                out.usage += usage
                out.send_work("scored", decided)
                self.decided += len(decided)
        return out

    def decide(self, works: list[Work]) -> tuple[list[Work], list]:
        """The twins decided. A generate request's twin (no candidates) is answered by the generator without the
        lock: the lock guards the scoring backends, not the generator (the served streams use it without the lock
        too), and held across a model server's answer (seconds, queued behind the streamed answers on a one-slot
        server) it kept every served batch waiting, checkout screenings with their 300 ms deadline among them."""
        answered = [w for w in works if not w.request.candidates]
        decided, usage = decide_naive(self.engine, answered) if answered else ([], [])
        for work in (w for w in works if w.request.candidates):  # one twin per hold: served work goes between
            with self.deciding.for_shadow():
                more, more_usage = decide_naive(self.engine, [work])
            decided, usage = decided + more, usage + more_usage
        return decided, usage

    async def until_idle(self) -> None:
        """Until no served batch is being decided, or at most the twins' maximum age (by then the waiting
        twins are stale and dropped: the handler never stalls past the consumer's poll interval)."""
        try:
            await asyncio.wait_for(self.idle.wait(), self.settings.shadow_max_age_ms / 1000)
        except TimeoutError:
            pass

    def drop_stale(self, works: list[Work]) -> tuple[list[Work], list]:
        limit = time.time() - self.settings.shadow_max_age_ms / 1000
        fresh = [w for w in works if w.admitted_at >= limit]
        usage = [
            usage_event(w.request, "shadow", section="dropped", outcome="dropped:age")
            for w in works
            if w.admitted_at < limit
        ]
        self.dropped += len(usage)
        return fresh, usage
