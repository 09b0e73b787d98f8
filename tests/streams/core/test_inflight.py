"""Requests in flight: held while sent on for work, released by their decision or dead letter, and never held
past hold_s; listeners hear each change between none held and some."""

from streams.core.inflight import InFlight


def test_requests_hold_until_decided_and_listeners_hear_each_change():
    flight, heard = InFlight(hold_s=5.0), []
    flight.subscribe(heard.append)
    flight.hold(["r1", "r2"], now=0.0)
    flight.hold(["r2"], now=1.0)
    assert flight.busy(now=2.0) and heard == [True]
    flight.release(["r1"], now=2.0)
    assert flight.busy(now=2.0) and heard == [True]
    flight.release(["r2", "never-held"], now=3.0)
    assert not flight.busy(now=3.0) and heard == [True, False]


def test_a_request_never_decided_stops_holding_after_hold_s():
    flight, heard = InFlight(hold_s=5.0), []
    flight.subscribe(heard.append)
    flight.hold(["lost"], now=0.0)
    flight.hold(["later"], now=3.0)
    assert flight.busy(now=4.9)
    assert flight.busy(now=5.5) and list(flight.until) == ["later"]
    assert not flight.busy(now=8.0) and heard == [True, False]
    flight.unsubscribe(heard.append)
    flight.hold(["again"], now=9.0)
    assert heard == [True, False]
