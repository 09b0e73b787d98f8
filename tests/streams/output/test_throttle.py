"""Streaming throttle: token bucket per client class, sentence releases, early stop at a closer."""
from __future__ import annotations

import pytest

from streams import tokens
from streams.output.throttle import CLIENT_RATES, StreamThrottle, TokenBucket


@pytest.mark.parametrize("rate, takes, waits", [
    (256, [(100, 0.0), (100, 0.0), (100, 0.0)], [0.0, 0.0, 44 / 256]),  # burst of 256, then debt
    (512, [(512, 0.0), (256, 0.25)], [0.0, 0.25]),  # 0.25 s refills 128 of the 256 taken
    (256, [(256, 0.0), (256, 1.0)], [0.0, 0.0]),  # a full second refills the bucket
    (256, [(256, 0.0), (256, 10.0), (300, 10.0)], [0.0, 0.0, 300 / 256]),  # saving is capped at capacity
])
def test_token_bucket(rate, takes, waits):
    bucket = TokenBucket(rate)
    assert [pytest.approx(bucket.take(n, now)) for n, now in takes] == waits


def test_client_classes():
    assert CLIENT_RATES == {"mobile": 256, "desktop": 512}
    with pytest.raises(ValueError, match="use one of mobile, desktop"):
        StreamThrottle("watch", "gpt-4o")


def stream(text: str, client: str = "mobile", step: int = 5):
    throttle, out, now = StreamThrottle(client, "gpt-4o"), [], 0.0
    for i in range(0, len(text), step):
        emit = throttle.feed(text[i:i + step], now)
        out.append(emit)
        now += 0.001
        if emit.done:
            return throttle, out
    out.append(throttle.finish(now))
    return throttle, out


def test_releases_whole_sentences_and_stops_at_a_closer():
    answer = "Use a set. It is O(1) per lookup.\n\n"
    throttle, emits = stream(answer + "I hope this helps! Let me know if you need more.")
    assert "".join(e.text for e in emits) == answer
    assert emits[-1].done and throttle.done
    assert all(e.text == "" or e.text.endswith((".", "\n")) for e in emits)
    assert emits[-1].sent_tokens == tokens.count(answer, "gpt-4o")  # progress: tokens released so far


def test_closer_inside_code_does_not_stop():
    text = "Run this:\n```python\nprint('Let me know if you need more.')\n```\nDone."
    throttle, emits = stream(text)
    assert "".join(e.text for e in emits) == text and not throttle.done


@pytest.mark.parametrize("client", list(CLIENT_RATES))
def test_delivery_is_paced_at_the_client_rate(client):
    """A sender that sleeps each wait_s delivers N tokens in (N - burst) / rate seconds."""
    throttle, now, total = StreamThrottle(client, "gpt-4o"), 0.0, 0
    for _ in range(300):
        emit = throttle.feed("The answer keeps going with one more plain sentence. ", now)
        now += emit.wait_s
        total = emit.sent_tokens
    rate = CLIENT_RATES[client]
    assert total > 2 * rate and now == pytest.approx((total - rate) / rate, abs=20 / rate)
