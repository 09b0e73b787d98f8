"""The HTTP side of the model-server engines: one asyncio loop and connection pool per process, a concurrency bound
and circuit per server, and the one retry loop every call goes through.

At most `max_concurrency` calls are at a server at once, granted earliest deadline first; waiting is queueing and
never counts against the server's circuit. Connect errors, timeouts, 408/409/425/429 and 5xx are retried with
backoff (Retry-After honoured) while the caller's deadline allows; then ModelUnavailable. `breaker_failures` in a
row open the circuit for `breaker_cooldown_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from dataclasses import dataclass

import httpx

from streams.core.deadlines import Slots
from streams.models.prefix import PrefixCache
from streams.models.protocol import ModelUnavailable, Usage

RETRYABLE = {408, 409, 425, 429, 500, 502, 503, 504}
# Seconds a pooled connection may sit idle before it is dropped: under the 5 s after which llama-server
# (cpp-httplib) and uvicorn close an idle one, so a call never goes out on a connection the server is closing
# (httpx's own 5 s raced it: "Server disconnected without sending a response", a retried call).
KEEPALIVE_S = 2.0


class Loop:
    """One asyncio loop in a daemon thread, shared by every openai engine of the process: the engines are called
    from the scoring worker's threads; their HTTP calls all run here, on pooled connections."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="jev-openai", daemon=True).start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


_loop: Loop | None = None
_loop_lock = threading.Lock()


def loop() -> Loop:
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = Loop()
        return _loop


@dataclass
class Breaker:
    """The circuit of one server: open after `failures` failures in a row, for `cooldown_s`; then half-open, one
    trial call at a time, closed again by a success."""

    failures: int
    cooldown_s: float
    streak: int = 0
    opened_at: float = 0.0
    trial: bool = False

    def allow(self, now: float) -> bool:
        if self.streak < self.failures:
            return True
        if now - self.opened_at < self.cooldown_s or self.trial:
            return False
        self.trial = True
        return True

    def success(self) -> None:
        self.streak, self.trial = 0, False

    def undecided(self) -> None:
        """A trial call ended without a verdict on the server (its caller's time ran out): the next call may try."""
        self.trial = False

    def failure(self, now: float) -> None:
        self.streak += 1
        self.trial = False
        if self.streak >= self.failures:
            self.opened_at = now

    @property
    def open(self) -> bool:
        return self.streak >= self.failures


def time_left(deadline: float) -> float:
    """Seconds until `deadline` (epoch seconds); infinite when there is none (0)."""
    return deadline - time.time() if deadline > 0 else math.inf


@dataclass
class Server:
    """One base URL: its connection pool, its concurrency bound, its circuit (created on the engine loop) and the
    prompts' blocks its prefix cache should hold (set by the first engine that claims cache reads on it)."""

    client: httpx.AsyncClient
    slots: Slots
    breaker: Breaker
    calls: int = 0
    waited: int = 0  # calls that found every slot taken and queued
    sent: PrefixCache | None = None

    @contextlib.asynccontextmanager
    async def slot(self, deadline: float, where: str):
        """One of the server's slots, held for the block. A deadline that passes while waiting ends the wait with
        ModelUnavailable(reason `deadline`); waiting never counts against the circuit."""
        left = time_left(deadline)
        if left <= 0:
            raise ModelUnavailable(f"{where}: the deadline passed before the call was sent", "deadline")
        if self.slots.full() or self.slots.waiters:
            self.waited += 1
        try:
            async with asyncio.timeout(None if math.isinf(left) else left):
                await self.slots.acquire(deadline)
        except TimeoutError:
            raise ModelUnavailable(
                f"{where}: the deadline passed while queued for one of the server's {self.slots.size} slots", "deadline"
            ) from None
        try:
            yield
        finally:
            self.slots.release()


_servers: dict[str, Server] = {}


def server(base_url: str, options: dict) -> Server:
    """The Server of `base_url` (called on the engine loop)."""
    if base_url not in _servers:
        _servers[base_url] = Server(
            httpx.AsyncClient(
                base_url=base_url.rstrip("/") + "/",
                timeout=options["timeout_s"],
                limits=httpx.Limits(max_connections=options["max_concurrency"] * 2, keepalive_expiry=KEEPALIVE_S),
            ),
            Slots(options["max_concurrency"]),
            Breaker(options["breaker_failures"], options["breaker_cooldown_s"]),
        )
    return _servers[base_url]


def calls(base_url: str = "") -> int:
    """HTTP calls sent so far (retries included) to the server at `base_url`, or to every server when empty."""
    return sum(srv.calls for url, srv in _servers.items() if not base_url or url == base_url)


def usage_of(body: dict) -> Usage | None:
    """The server's usage in an OpenAI-style body, None when it sent none (or an unreadable one)."""
    raw = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(raw, dict):
        return None
    details = raw.get("prompt_tokens_details") or {}
    try:
        prompt = int(raw.get("prompt_tokens", raw.get("total_tokens", 0)) or 0)
        return Usage(
            prompt,
            int(raw.get("completion_tokens") or 0),
            int((details.get("cached_tokens") if isinstance(details, dict) else 0) or 0),
        )
    except (TypeError, ValueError):
        return None


async def send(
    srv: Server,
    method: str,
    path: str,
    payload: dict | None,
    headers: dict,
    deadline: float,
    options: dict,
    stream: bool = False,
) -> httpx.Response:
    """The server's 2xx response to one call, with retries inside `deadline` (epoch seconds; 0 = none) and the
    circuit. A plain call takes one of the server's slots for each attempt; a streamed one (`stream`: its body left
    unread) is sent inside the slot its caller holds for the whole stream (Server.slot)."""
    where = f"{srv.client.base_url}{path}"
    attempt = 0
    while True:
        async with contextlib.nullcontext() if stream else srv.slot(deadline, where):
            left = time_left(deadline)
            if left <= 0:
                raise ModelUnavailable(f"{where}: the deadline passed before the call was sent", "deadline")
            if not srv.breaker.allow(time.time()):
                raise ModelUnavailable(f"{srv.client.base_url}: circuit open after {srv.breaker.streak} failures")
            cut = left < options["timeout_s"]  # the caller's time ends before the call's own timeout
            retry_after = None
            try:
                request = srv.client.build_request(
                    method, path, json=payload, headers=headers, timeout=min(left, options["timeout_s"])
                )
                srv.calls += 1
                response = await srv.client.send(request, stream=stream)
                if response.status_code < 400:
                    srv.breaker.success()
                    return response
                problem = f"HTTP {response.status_code}"
                retry_after = response.headers.get("retry-after")
                detail = "" if stream else f": {response.text[:200]}"
                await response.aclose()
                if response.status_code not in RETRYABLE:
                    srv.breaker.failure(time.time())
                    raise ModelUnavailable(f"{where}: {problem}{detail}")
            except httpx.TimeoutException as exc:
                if cut:  # the caller's deadline ended it: the server was busy, not failing
                    srv.breaker.undecided()
                    raise ModelUnavailable(
                        f"{where}: {type(exc).__name__}: the deadline passed during the call (attempt {attempt + 1})",
                        "deadline",
                    ) from None
                problem = type(exc).__name__
            except httpx.TransportError as exc:  # connect errors, dropped connections
                problem = type(exc).__name__
            srv.breaker.failure(time.time())
        attempt += 1
        wait = options["backoff_s"] * 2 ** (attempt - 1)
        if retry_after and retry_after.replace(".", "", 1).isdigit():
            wait = max(wait, float(retry_after))
        if attempt > options["retries"] or wait >= time_left(deadline):
            raise ModelUnavailable(f"{where}: {problem} after {attempt} attempt(s)")
        await asyncio.sleep(wait)
