"""The client library: how an upstream service (and Jev's own demo, CLI and gateway) asks Jev for a decision.

    async with JevClient("acme") as jev:
        decision = await jev.decide("refund request, order 1234", ["approve", "escalate"], decision_type="refund")
        async for chunk in jev.stream("我的订单什么时候到？"):
            print(chunk.text, end="")

A call publishes one request on jev.requests.v1 (signed with the tenant's key where JEV_TENANT_KEYS is set, as
ingest checks it) and waits, by request id, for its reply on the tenant's own reply topics
(`jev.tenant.<slug>.<kind>.v1`, streams.core.tenants.reply_topic): a Decision, or a Rejection raised as
JevRejected, or JevTimeout. One consumer per client reads those topics for every call in flight (futures keyed
by request id). A retry with the same request id is idempotent: ingest answers a request it admitted already with
its first decision, and spends nothing again. The tenant is always the client's: a request naming another is a
ValueError, never sent. SyncJevClient is the same API, blocking, for scripts.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from infra.broker import create_topics
from schemas.batch import BatchResult
from schemas.records import Chunk, Decision, Rejection, Request
from schemas.topics import name
from streams.batch.stage import decode_member
from streams.core.tenants import REPLY_KINDS, SIGNATURE_HEADER, BadTenant, canonical, load_keys, reply_topic, signature
from streams.settings import Settings, load

FETCH_WAIT_MS = 10  # a reply is read as it lands, not once per fetch wait (tansu holds a fetch the full wait)
# A stream's chunks are acknowledged before its decision, but on another topic, so the decision may be read first:
# the chunks still to come are waited for this long.
CHUNK_GRACE_S = 5.0


class JevError(Exception):
    """Jev did not answer this call with a decision (the subclasses say why)."""


class JevRejected(JevError):
    """Jev refused the request: `reason` is the Rejection's reason code (over_budget, rate_limited, bad_request,
    …), `detail` what to fix, `retry_after` the seconds after which a budget or rate refusal may be tried again
    (None where not known)."""

    def __init__(self, reason: str, detail: str, request_id: str = "", retry_after: float | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail, self.request_id, self.retry_after = reason, detail, request_id, retry_after


class JevHeld(JevError):
    """The decision was flagged for human review (a sensitive word, a review policy): it is held, not served."""

    def __init__(self, decision: Decision):
        super().__init__(f"request {decision.request_id} is held for human review ({', '.join(decision.chain)})")
        self.decision = decision


class JevTimeout(JevError):
    """No reply within the timeout. Send the request again with the same request_id: it is idempotent."""

    def __init__(self, request_id: str, timeout: float, bootstrap: str, what: str = ""):
        super().__init__(
            f"no reply to {what or 'request ' + request_id} within {timeout:g} s: is Jev running on {bootstrap} "
            f"(`jev up`)? Send it again with the same {'job' if what else 'request_id'} {request_id!r} "
            f"(idempotent), or raise the timeout"
        )
        self.request_id = request_id


@dataclass
class _Call:
    """One request id in flight: its decision's future, and the chunk queue of a stream following it."""

    future: asyncio.Future
    chunks: asyncio.Queue | None = None
    users: int = 0


@dataclass
class _Job:
    expected: set[str]
    on_result: Callable[[int], None] | None = None
    results: dict[str, BatchResult] = field(default_factory=dict)
    refused: dict[str, Rejection] = field(default_factory=dict)  # members the batch stage rejected (budget, key)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def check(self) -> None:
        if len(self.results) + len(self.refused) >= len(self.expected):
            self.done.set()


class JevClient:
    """An async client for one tenant: start() (or `async with`) once, then any number of concurrent calls."""

    def __init__(
        self, tenant: str, *, settings: Settings | None = None, service: str = "client", timeout: float = 30.0
    ) -> None:
        try:
            self.tenant = canonical(tenant)
        except BadTenant as exc:
            raise ValueError(str(exc)) from None
        self.settings = settings or load()
        self.service, self.timeout = service, timeout
        try:
            keys = load_keys(self.settings.tenant_keys)
        except SystemExit as exc:  # a bad keys file: the library raises, the caller decides
            raise JevError(str(exc)) from None
        if keys is not None and self.tenant not in keys:
            raise JevError(
                f"JEV_TENANT_KEYS={self.settings.tenant_keys} holds no key for tenant {self.tenant!r}: "
                f"add it there (ingest refuses unsigned requests while that file is set)"
            )
        self.key = keys[self.tenant] if keys is not None else None
        self.topics = {reply_topic(kind, self.tenant): kind for kind in REPLY_KINDS}
        self.calls: dict[str, _Call] = {}
        self.jobs: dict[str, _Job] = {}
        self.producer: Any = None  # an AIOKafkaProducer (untyped) once started
        self.consumer: Any = None  # an AIOKafkaConsumer (untyped) once started
        self.reader: asyncio.Task | None = None

    async def start(self) -> None:
        """Create the tenant's reply topics if they do not exist, and read them from their end: every reply to a
        request sent after start() returns is seen."""
        bootstrap = self.settings.bootstrap
        await create_topics(bootstrap, list(self.topics), self.settings.partitions)
        self.consumer = AIOKafkaConsumer(
            *self.topics,
            bootstrap_servers=bootstrap,
            group_id=None,
            auto_offset_reset="latest",
            fetch_max_wait_ms=FETCH_WAIT_MS,
        )
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        await asyncio.gather(self.consumer.start(), self.producer.start())
        deadline = time.monotonic() + 30
        while {tp.topic for tp in self.consumer.assignment()} != set(self.topics):
            if time.monotonic() > deadline:
                raise JevError(f"the reply topics of tenant {self.tenant!r} were not assigned on {bootstrap}")
            await asyncio.sleep(0.05)
        for tp in self.consumer.assignment():
            await self.consumer.position(tp)  # the end, fixed now: nothing later is skipped
        self.reader = asyncio.create_task(self._read())

    async def stop(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            await asyncio.gather(self.reader, return_exceptions=True)
        for part in (self.producer, self.consumer):
            if part is not None:
                await part.stop()
        for call in self.calls.values():
            if not call.future.done():
                call.future.set_exception(JevError("the client stopped before the reply came"))

    async def __aenter__(self) -> JevClient:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def body(self, request: Request | dict) -> dict:
        """`request` as the JSON object sent: request_id, tenant, service and created_at filled in where missing;
        ValueError when it names a tenant other than the client's."""
        data = dict(request.to_representation() if isinstance(request, Request) else request)
        named = data.get("tenant")
        if named not in (None, ""):
            try:
                other = canonical(named)
            except BadTenant as exc:
                raise ValueError(str(exc)) from None
            if other != self.tenant:
                raise ValueError(
                    f"this client sends for tenant {self.tenant!r}, the request names {named!r}: use a JevClient "
                    f"of that tenant (each tenant reads only its own replies)"
                )
        data["tenant"] = self.tenant
        data["request_id"] = data.get("request_id") or str(uuid.uuid4())
        data["service"] = data.get("service") or self.service
        data["created_at"] = data.get("created_at") or time.time()
        return data

    async def send(self, data: dict) -> None:
        raw = orjson.dumps(data)
        headers = [(SIGNATURE_HEADER, signature(self.key, raw).encode())] if self.key is not None else None
        key = (data.get("session_id") or data["request_id"]).encode()
        await self.producer.send_and_wait(name("requests"), raw, key=key, headers=headers)

    def _track(self, request_id: str, stream: bool = False) -> _Call:
        call = self.calls.get(request_id)
        if call is None or call.future.done():
            call = self.calls[request_id] = _Call(asyncio.get_running_loop().create_future())
        if stream and call.chunks is None:
            call.chunks = asyncio.Queue()
        call.users += 1
        return call

    def _release(self, request_id: str, call: _Call) -> None:
        call.users -= 1
        if call.users <= 0 and self.calls.get(request_id) is call:
            del self.calls[request_id]

    async def request(self, request: Request | dict, *, timeout: float | None = None) -> Decision:
        """Send `request` and return its Decision; JevRejected, JevHeld or JevTimeout otherwise."""
        self._started()
        data = self.body(request)
        rid, wait = data["request_id"], self.timeout if timeout is None else timeout
        call = self._track(rid)
        try:
            await self.send(data)
            try:
                return await asyncio.wait_for(asyncio.shield(call.future), wait)
            except TimeoutError:
                raise JevTimeout(rid, wait, self.settings.bootstrap) from None
        finally:
            self._release(rid, call)

    async def decide(
        self,
        state,
        candidates,
        *,
        decision_type: str,
        request_id: str | None = None,
        timeout: float | None = None,
        **fields,
    ) -> Decision:
        """Choose among `candidates` (ids, or {"id", "text"} objects) given `state` (text or a JSON object)."""
        listed = [c if isinstance(c, dict) else {"id": str(c), "text": str(c)} for c in candidates]
        body = {**fields, "kind": "decide", "state": state, "candidates": listed, "decision_type": decision_type}
        return await self.request({**body, "request_id": request_id}, timeout=timeout)

    async def generate(
        self,
        prompt,
        *,
        decision_type: str = "customer_service",
        request_id: str | None = None,
        timeout: float | None = None,
        **fields,
    ) -> Decision:
        """An answer to `prompt`, whole (the Decision's text)."""
        body = {**fields, "kind": "generate", "state": prompt, "decision_type": decision_type}
        return await self.request({**body, "request_id": request_id}, timeout=timeout)

    def stream(
        self,
        prompt,
        *,
        decision_type: str = "customer_service",
        request_id: str | None = None,
        timeout: float | None = None,
        **fields,
    ) -> ReplyStream:
        """An answer to `prompt` as its chunks arrive (the request is sent on the first iteration)."""
        body = {**fields, "kind": "generate", "stream": True, "state": prompt, "decision_type": decision_type}
        return ReplyStream(
            self, self.body({**body, "request_id": request_id}), self.timeout if timeout is None else timeout
        )

    async def submit_batch(
        self, job: str, members: list[dict], *, timeout: float | None = None, on_result=None
    ) -> list[BatchResult]:
        """Submit batch `job` (members as job-file lines: member, kind, template, quota_tokens, variables) and
        return one BatchResult per member, in their order (`on_result(results so far)` as each arrives). A
        malformed member is a ValueError, nothing sent."""
        self._started()
        lines = []
        for member in members:
            data = self.body({**member, "job": job})
            del data["created_at"], data["request_id"]
            data["submitted_at"] = time.time()
            lines.append(decode_member(orjson.dumps(data)))
        wanted = [m.member for m in lines]
        if len(set(wanted)) != len(wanted):
            raise ValueError(f"batch job {job!r} lists a member twice: member ids must be unique in a job")
        tracked = self.jobs[job] = _Job(set(wanted), on_result=on_result)
        wait = self.timeout if timeout is None else timeout
        try:
            for member in lines:
                await self.producer.send(name("batch"), member.dumps(), key=job.encode())
            await self.producer.flush()
            try:
                await asyncio.wait_for(tracked.done.wait(), wait)
            except TimeoutError:
                what = f"batch job {job!r} ({len(tracked.results)}/{len(wanted)} results)"
                raise JevTimeout(job, wait, self.settings.bootstrap, what) from None
        finally:
            self.jobs.pop(job, None)
        if tracked.refused:
            refused, first = next(iter(tracked.refused.items()))
            raise JevRejected(
                first.reason,
                f"{len(tracked.refused)} of {len(wanted)} members of batch job {job!r} were refused; member "
                f"{refused!r}: {first.detail}",
                first.request_id,
                first.retry_after_s or None,
            )
        return [tracked.results[m] for m in wanted]

    def _started(self) -> None:
        if self.reader is None or self.reader.done():
            raise JevError("the client is not started: `async with JevClient(...)` or `await client.start()` first")

    async def _read(self) -> None:
        """The one reader of this tenant's reply topics: each reply to the call (or batch job) waiting for it."""
        while True:
            for tp, messages in (await self.consumer.getmany(timeout_ms=1000)).items():
                kind = self.topics[tp.topic]
                for message in messages:
                    self._dispatch(kind, message)

    def _dispatch(self, kind: str, message) -> None:
        if kind == "batch_results":
            job = self.jobs.get((message.key or b"").decode())
            if job is not None:
                result = BatchResult.loads(message.value)
                if result.member in job.expected:
                    if result.member not in job.results and job.on_result is not None:
                        job.on_result(len(job.results) + 1)
                    job.results.setdefault(result.member, result)  # a redelivery repeats: the first wins
                    job.check()
            return
        if kind == "rejected" and self.jobs:  # a batch member's refusal is keyed "<job>:<member>"
            rid = (message.key or b"").decode()
            for name_, job in self.jobs.items():
                member = rid[len(name_) + 1 :] if rid.startswith(name_ + ":") else None
                if member in job.expected and member not in job.results:
                    job.refused.setdefault(member, Rejection.loads(message.value))
                    job.check()
        call = self.calls.get((message.key or b"").decode())
        if call is None:  # a reply to a call no longer waiting (or a repeat of one already answered)
            return
        if kind == "chunks":
            if call.chunks is not None:
                call.chunks.put_nowait(Chunk.loads(message.value))
            return
        if call.future.done():
            return
        if kind == "decisions":
            call.future.set_result(Decision.loads(message.value))
        elif kind == "review":
            call.future.set_exception(JevHeld(Decision.loads(message.value)))
        elif kind == "rejected":
            r = Rejection.loads(message.value)
            call.future.set_exception(JevRejected(r.reason, r.detail, r.request_id, r.retry_after_s or None))
        if call.chunks is not None:
            call.chunks.put_nowait(None)  # wakes a stream waiting for chunks: the call has its outcome


class ReplyStream:
    """The chunks of one streamed answer, in seq order without repeats (a redelivered stream sends its seq
    numbers again); once exhausted, `decision` holds the Decision with the totals."""

    def __init__(self, client: JevClient, body: dict, timeout: float):
        self.client, self.body, self.timeout = client, body, timeout
        self.request_id: str = body["request_id"]
        self.decision: Decision | None = None
        self.call: _Call | None = None
        self.next_seq, self.ended = 0, False
        self.pending: dict[int, Chunk] = {}  # chunks read ahead of the next seq
        self.grace: float | None = None  # decided before its final chunk came: when to stop waiting for it

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self

    def chunk_queue(self) -> asyncio.Queue:
        """The chunk queue of this stream's call (tracked with stream=True, so it has one)."""
        if self.call is None or self.call.chunks is None:
            raise JevError(f"the stream of {self.request_id} has not started: iterate it")
        return self.call.chunks

    async def __anext__(self) -> Chunk:
        if self.call is None:
            self.client._started()
            self.call = self.client._track(self.request_id, stream=True)
            self.deadline = time.monotonic() + self.timeout
            await self.client.send(self.body)
        while True:
            if self.next_seq in self.pending:
                chunk = self.pending.pop(self.next_seq)
                self.next_seq += 1
                self.ended = chunk.final
                return chunk
            decided = self.call.future.done()
            if decided and (self.ended or self.call.future.exception() is not None or self.late()):
                await self.aclose()
                self.decision = self.call.future.result()  # raises JevRejected / JevHeld
                raise StopAsyncIteration
            left = self.deadline - time.monotonic()
            if left <= 0:
                await self.aclose()
                raise JevTimeout(self.request_id, self.timeout, self.client.settings.bootstrap)
            if decided:  # the decision read before the last chunks (another topic): they come next
                self.grace = self.grace or time.monotonic() + CHUNK_GRACE_S
                left = min(left, max(self.grace - time.monotonic(), 0.0))
            try:
                chunk = await asyncio.wait_for(self.chunk_queue().get(), left)
            except TimeoutError:
                continue
            if chunk is not None and chunk.seq >= self.next_seq:
                self.pending.setdefault(chunk.seq, chunk)

    def late(self) -> bool:
        """Decided, and CHUNK_GRACE_S passed with no final chunk: the decision's text is the answer."""
        return self.grace is not None and self.grace <= time.monotonic()

    async def aclose(self) -> None:
        """Stop following this answer (the pipeline finishes it; its chunks are no longer read)."""
        if self.call is not None and self.request_id in self.client.calls:
            self.client._release(self.request_id, self.call)


class SyncJevClient:
    """JevClient for scripts: the same methods, blocking, on an event loop in a thread of its own."""

    def __init__(self, tenant: str, **options) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="jev-client", daemon=True)
        self.thread.start()
        self.client = self._run(self._make(tenant, options))

    async def _make(self, tenant: str, options: dict) -> JevClient:
        return JevClient(tenant, **options)

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def start(self) -> None:
        self._run(self.client.start())

    def stop(self) -> None:
        try:
            self._run(self.client.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)

    def __enter__(self) -> SyncJevClient:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def request(self, request: Request | dict, *, timeout: float | None = None) -> Decision:
        return self._run(self.client.request(request, timeout=timeout))

    def decide(self, state, candidates, **options) -> Decision:
        return self._run(self.client.decide(state, candidates, **options))

    def generate(self, prompt, **options) -> Decision:
        return self._run(self.client.generate(prompt, **options))

    def submit_batch(self, job: str, members: list[dict], *, timeout: float | None = None) -> list[BatchResult]:
        return self._run(self.client.submit_batch(job, members, timeout=timeout))

    def stream(self, prompt, **options) -> Iterator[Chunk]:
        """The chunks as a generator; the Decision is its return value (`StopIteration.value`, or `yield from`)."""
        replies = self.client.stream(prompt, **options)
        try:
            while True:
                try:
                    yield self._run(replies.__anext__())
                except StopAsyncIteration:
                    return replies.decision
        finally:
            self._run(replies.aclose())
