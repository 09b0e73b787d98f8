"""ingest: decode, validate, count tokens, admit or dead-letter. One Kafka message per request in;
one WorkBatch per partition out."""
from __future__ import annotations

from schemas.records import Rejection
from streams.ingest.decode import admit
from streams.usage.events import usage_event


def register(app, topics, settings, known_types: set[str]) -> None:
    @app.agent(topics.requests, name="count_tokens")
    async def count_tokens(stream):
        async for raws in stream.take(settings.stage_batch_max, within=settings.stage_batch_wait_ms / 1000):
            admitted, usage = [], []
            for raw in raws:
                result = admit(raw if isinstance(raw, bytes) else bytes(raw), max_bytes=settings.max_request_bytes,
                               default_model=settings.default_model, known_types=known_types)
                if isinstance(result, Rejection):
                    await topics.rejected.send(key=result.request_id or None, value=result)
                    continue
                admitted.append(result)
                usage.append(usage_event(result.request, "ingest", model=result.model,
                                         nominal_tokens=0, candidates=len(result.request.candidates)))
            await topics.send_work(topics.admitted, admitted, key=lambda w: w.request.session_id or w.request.request_id)
            await topics.send_usage(usage)
