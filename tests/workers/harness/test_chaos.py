"""`jev chaos`: an injected bad input counts as caught only when a dead letter for that very input comes back; its
log and report say when faults happened and how long decisions stalled."""

import asyncio
import time

from schemas.topics import name
from streams.core.deadletter import dead_letter, undecodable
from tests.conftest import consumed
from workers.harness.chaos import (
    Collector,
    Kill,
    hostile_inputs,
    injected_id,
    internal_poison,
    longest_gap,
    recovery_s,
    rejected_id,
    timed,
)


def test_each_injected_input_has_its_own_id():
    ids = [injected_id(name("requests"), raw) for raw in hostile_inputs()] + [
        injected_id(t, raw) for t, raw in internal_poison()
    ]
    assert len(set(ids)) == len(ids)


def test_a_dead_letter_names_the_input_it_stands_for():
    raw = hostile_inputs()[0]
    assert rejected_id(dead_letter("bad_json", "x", "ingest", raw)) == injected_id(name("requests"), raw)
    topic, poison = internal_poison()[0]
    letter = undecodable(consumed(topic, [poison])[0], ValueError("x"))
    assert rejected_id(letter) == injected_id(topic, poison)
    assert rejected_id(letter) != injected_id(name("scored"), poison)  # the same bytes sent elsewhere
    huge = hostile_inputs()[8]
    assert len(huge) > 65_536 and rejected_id(
        undecodable(consumed(name("scored"), [huge])[0], ValueError())
    ) == injected_id(name("scored"), huge)
    assert rejected_id(dead_letter("bad_internal_message", "x", "score", poison)) == injected_id(name("score"), poison)


def test_the_longest_gap_is_the_longest_stall_between_successive_first_decisions():
    assert longest_gap([5.0, 1.0, 2.0, 9.5, 10.0], started=0.5) == {  # from 5.0 to 9.5, after 3 decisions
        "longest_gap_s": 4.5,
        "longest_gap_at_s": 4.5,
        "decided_before_longest_gap": 3,
    }
    assert longest_gap([1.0])["longest_gap_s"] == 0.0 and longest_gap([])["decided_before_longest_gap"] == 0


def test_the_chaos_log_says_when_each_fault_happened():
    said = []
    timed(said.append, time.monotonic() - 12.0)("SIGKILL stage")
    assert said[0].startswith("[+12.") and said[0].endswith(" s] SIGKILL stage")


def test_waiting_for_decisions_returns_the_ids_still_undecided_once_all_are_in_or_the_time_is_up():
    collector = Collector("localhost:1")
    collector.decisions["r-1"] = collector.decisions["r-2"] = object()
    assert asyncio.run(collector.wait_for({"r-1", "r-2"}, timeout=5)) == set()
    started = time.monotonic()
    assert asyncio.run(collector.wait_for({"r-1", "r-3"}, timeout=0.2, poll_s=0.05)) == {"r-3"}
    assert 0.2 <= time.monotonic() - started < 5


def test_recovery_is_the_time_from_the_kill_to_the_last_decision_of_what_was_undecided_then():
    kill = Kill("stage", 41, at=100.0, undecided={"r-2", "r-3", "r-4"})
    first_seen = {"r-1": 90.0, "r-2": 101.0, "r-3": 125.5, "r-4": 103.0, "r-9": 200.0}  # r-9: not undecided then
    assert kill.recovery_s(first_seen) == 25.5
    assert kill.timeline(first_seen) == [2, 0, 1]  # two within 10 s, none in the next 10, the last at 25.5 s
    kill.replaced_at = 160.0
    assert kill.report(first_seen, started=40.0) == {
        "role": "stage",
        "pid": 41,
        "at_s": 60.0,
        "undecided_at_kill": 3,
        "recovery_s": 25.5,
        "replaced_s": 60.0,
        "decided_per_10s": [2, 0, 1],
    }


def test_a_request_never_decided_after_a_kill_leaves_no_recovery_time():
    first = Kill("faust", 1, at=10.0, undecided={"a", "b"})
    second = Kill("scoring", 2, at=20.0, undecided={"b"})
    assert recovery_s([first, second], {"a": 12.0}) is None  # b never decided: not recovered
    assert recovery_s([first, second], {"a": 12.0, "b": 27.0}) == 17.0  # the slowest kill's
    assert recovery_s([], {"a": 1.0}) is None  # no kill, nothing to recover from
    assert Kill("stage", 3, at=5.0, undecided=set()).recovery_s({}) == 0.0  # nothing was left to decide
