"""Re-score recorded requests from the requests topic with a new engine configuration and compare with the
decisions that were recorded for them: agreement and token deltas (`jev replay`)."""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer

from schemas.records import Decision, Rejection
from streams.ingest.decode import Admission, admit


async def read_topic(bootstrap: str, topic: str, since_ms: int) -> list:
    """Every message of `topic` with a timestamp at or after `since_ms`, read to the current end."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
    )
    await consumer.start()
    try:
        messages, idle = [], 0
        while idle < 3:  # tansu's end offsets are unreliable: read until three empty polls in a row
            polled = await consumer.getmany(timeout_ms=300)
            idle = 0 if polled else idle + 1
            messages += [m for msgs in polled.values() for m in msgs if m.timestamp >= since_ms]
        return messages
    finally:
        await consumer.stop()


def compare(engine, admission: Admission, requests: list[bytes], recorded: dict[str, Decision]) -> dict:
    """Decide every admissible recorded request again; agreement with the recorded action and token deltas."""
    replayed = agree = compared = 0
    before = after = 0
    for raw in requests:
        work = admit(raw, admission)
        if isinstance(work, Rejection):
            continue
        decision, _ = engine.decide(work)
        replayed += 1
        old = recorded.get(decision.request_id)
        if old is None or old.tier.startswith("cache"):
            continue
        compared += 1
        agree += decision.action_id == old.action_id
        before += old.input_tokens + old.output_tokens
        after += decision.input_tokens + decision.output_tokens
    return {
        "replayed": replayed,
        "compared": compared,
        "agreement": round(agree / compared, 4) if compared else None,
        "tokens_recorded": before,
        "tokens_replayed": after,
        "token_delta": after - before,
    }


def since_ms(window: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if not window or window[-1] not in units or not window[:-1].isdigit():
        raise ValueError(f"--since {window!r}: write a number and a unit, e.g. 30m, 24h, 7d")
    return int((time.time() - int(window[:-1]) * units[window[-1]]) * 1000)
