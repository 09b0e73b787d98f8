"""The model-server transport: the circuit's states and the usage forms servers send (the slots calls queue for:
tests/streams/core/test_deadlines.py)."""

from streams.models.http import Breaker, usage_of
from streams.models.protocol import Usage


def test_breaker_half_open_allows_one_trial_at_a_time():
    b = Breaker(failures=2, cooldown_s=1.0)
    b.failure(0.0), b.failure(0.0)
    assert not b.allow(0.5) and b.allow(1.5) and not b.allow(1.6)
    b.success()
    assert b.allow(1.7) and not b.open


def test_usage_of_reads_the_forms_servers_send():
    assert usage_of({"usage": {"total_tokens": 9}}) == Usage(9, 0, 0)
    assert usage_of({"usage": None}) is None and usage_of({"usage": {"prompt_tokens": "x"}}) is None
