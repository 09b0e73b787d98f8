"""postprocess: the scored topic's micro-batches through the postprocess stage (streams/postprocess/stage.py), its
Outbox delivered by the one Sender before the batch is committed."""

from __future__ import annotations

import faust

from streams.core.outbox import Delivers
from streams.postprocess.stage import Postprocess
from streams.runtime.consumer import run_agent, take_work
from streams.runtime.seen_log import RequestsSeenLog
from streams.runtime.topics import Topics
from streams.settings import Settings


def register(
    app: faust.App,
    topics: Topics,
    settings: Settings,
    postprocess: Postprocess,
    sender: Delivers,
    seen: RequestsSeenLog,
) -> None:
    @app.agent(topics.scored, name="format_decision")
    async def format_decision(stream):
        await seen.wait_loaded(stream)  # what was decided before this process started is not decided again
        await run_agent(take_work(stream, settings), postprocess, sender)
