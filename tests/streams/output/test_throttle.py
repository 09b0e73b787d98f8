"""The token bucket that paces streamed answers."""

from __future__ import annotations

import pytest

from streams.output.throttle import TokenBucket


@pytest.mark.parametrize(
    "rate, takes, waits",
    [
        (256, [(100, 0.0), (100, 0.0), (100, 0.0)], [0.0, 0.0, 44 / 256]),  # burst of 256, then debt
        (512, [(512, 0.0), (256, 0.25)], [0.0, 0.25]),  # 0.25 s refills 128 of the 256 taken
        (256, [(256, 0.0), (256, 1.0)], [0.0, 0.0]),  # a full second refills the bucket
        (256, [(256, 0.0), (256, 10.0), (300, 10.0)], [0.0, 0.0, 300 / 256]),  # saving is capped at capacity
    ],
)
def test_token_bucket(rate, takes, waits):
    bucket = TokenBucket(rate)
    assert [pytest.approx(bucket.take(n, now)) for n, now in takes] == waits
