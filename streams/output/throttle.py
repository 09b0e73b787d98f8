"""The token bucket that paces a streamed answer (streams.output.chunks's Pacer): `rate` tokens per second per
client class (stream.yaml). Pure: the caller passes the clock (`now`, seconds) and sleeps the wait itself."""

from __future__ import annotations


class TokenBucket:
    """`rate` tokens per second, at most `capacity` saved up. Taking more than is there runs a debt the
    sender waits out: take() returns the seconds to wait before sending."""

    def __init__(self, rate: float, capacity: float | None = None, now: float = 0.0):
        if rate <= 0:
            raise ValueError(f"token bucket rate must be > 0 tokens/s, got {rate}")
        self.rate = rate
        self.capacity = rate if capacity is None else capacity
        self.level = self.capacity
        self.updated = now

    def take(self, n: int, now: float) -> float:
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now
        self.level -= n
        return 0.0 if self.level >= 0 else -self.level / self.rate
