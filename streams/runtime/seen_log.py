"""The requests-seen topic (streams.idempotency.requests' LOG_TOPIC) followed into a process's Requests, so a
redelivery of a request decided before this process started gets its first decision again."""

from __future__ import annotations

import asyncio
import logging
import time

import faust

from schemas.topics import name
from streams.idempotency.requests import LOG_TOPIC, Requests
from streams.runtime.consumer import follow_from_start

log = logging.getLogger("jev.idempotency")


class RequestsSeenLog:
    """The requests-seen topic (streams.idempotency.requests), read from its beginning and followed into
    `requests` by every stage process. Ingest, and the agents that decide (cache hits, postprocess) when they
    read a topic, take their first input only once what the topic held at start is read (`loaded`, which starts
    the follower if nothing has yet), or LOAD_TIMEOUT_S passed: then they go on, logging that redeliveries may
    be decided again."""

    LOAD_TIMEOUT_S = 60.0
    SLOW_LOAD_S = 10.0  # a load that held the first input back longer is logged

    def __init__(self, bootstrap: str, requests: Requests, poll_ms: int = 100):
        self.bootstrap, self.requests, self.poll_ms = bootstrap, requests, poll_ms
        self.stopping, self.caught_up = asyncio.Event(), asyncio.Event()
        self.following: asyncio.Future | None = None

    async def follow(self) -> None:
        """Follow the topic until stopped (one follower per process, whoever starts it first)."""
        if self.following is None:
            self.following = asyncio.ensure_future(
                follow_from_start(
                    self.bootstrap,
                    name(LOG_TOPIC),
                    self.requests.apply,
                    self.stopping,
                    self.poll_ms,
                    "requests-seen record",
                    caught_up=self.caught_up.set,
                    on_restart=self.requests.orphan_undecided,
                )
            )
        await asyncio.shield(self.following)

    async def wait_loaded(self, stream) -> None:
        """`loaded`, for an agent reading `stream`: only when it reads a topic (not an agent tested alone)."""
        if isinstance(stream.channel, faust.Topic):
            await self.loaded()

    async def loaded(self) -> None:
        if self.following is None:
            asyncio.ensure_future(self.follow())
        began = time.monotonic()
        try:
            await asyncio.wait_for(self.caught_up.wait(), self.LOAD_TIMEOUT_S)
        except TimeoutError:
            log.warning(
                "the requests-seen topic was not read within %.0f s: going on without it, so a "
                "redelivery of a request decided before this process started may be decided again",
                self.LOAD_TIMEOUT_S,
            )
            return
        if (waited := time.monotonic() - began) > self.SLOW_LOAD_S:
            log.warning("reading the requests-seen topic held this stage's first input back %.1f s", waited)
