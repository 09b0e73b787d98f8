"""The guard's statistics and actions, without a broker."""

import pytest

from schemas.records import Verdict
from streams.core.switches import CASCADE_KEY, L2_KEY
from streams.shadow.floors import DEFAULTS, parse_floors
from streams.shadow.guard import Guard, Knob, wilson_lower


def verdict(i: int, kept: bool, *mechanisms: str, labelled: bool = False) -> Verdict:
    return Verdict(
        request_id=f"r{i}",
        ts=0.0,
        tenant="t",
        service="s",
        decision_type="ranking",
        kind="decide",
        mechanisms=list(mechanisms),
        agreed=kept,
        kept=kept,
        labelled=labelled,
    )


@pytest.mark.parametrize(
    "kept,n,z,expected",
    [
        (100, 100, 1.645, 0.9737),
        (189, 200, 1.645, 0.9121),
        (99, 100, 1.645, 0.9564),
        (0, 10, 1.645, 0.0),
        (0, 0, 1.645, 0.0),
    ],
)
def test_wilson_lower_bound(kept, n, z, expected):
    assert wilson_lower(kept, n, z) == pytest.approx(expected, abs=1e-4)


def test_floors_cover_every_mechanism_and_parse_overrides():
    floors = parse_floors("cache.l2=0.99,distill.*=0.9")
    assert floors["cache.l2"] == 0.99 and floors["distill.time"] == floors["distill.dedup"] == 0.9
    assert floors["cascade"] == DEFAULTS["cascade"][0]
    with pytest.raises(ValueError, match="unknown mechanism 'cache.l9'"):
        parse_floors("cache.l9=0.9")
    with pytest.raises(ValueError, match="within 0..1"):
        parse_floors("cache.l1=1.5")


def test_no_judgement_before_the_minimum_sample():
    guard = Guard(parse_floors(""), min_sample=20, z=1.645)
    assert guard.observe([verdict(i, False, "cache.l1") for i in range(19)]) == []
    assert guard.agreement()["cache.l1"] == {"verdicts": 19, "kept": 0, "agreement": 0.0, "lower": 0.0, "floor": 0.97}


def test_a_mechanism_without_a_knob_is_switched_off_with_a_revertable_alert():
    guard = Guard(parse_floors(""), min_sample=10, z=1.645)
    actions = guard.observe([verdict(i, i % 2 == 0, "cache.l1") for i in range(10)], now=5.0)
    assert len(actions) == 1
    control, alert = actions[0].control, actions[0].alert
    assert (control.kind, control.key, control.value) == ("switch", "cache.l1", False)
    assert alert.rule == "shadow_agreement" and alert.scope == "cache.l1" and alert.threshold == 0.97
    assert "jev switch set cache.l1 on" in alert.message and alert.value < 0.97
    assert guard.observe([verdict(i, False, "cache.l1") for i in range(10, 30)]) == []  # off: no more actions
    from schemas.records import Control

    guard.on_control(Control(kind="switch", key="cache.l1", value=True))  # the operator's revert
    assert len(guard.observe([verdict(i, False, "cache.l1") for i in range(30, 40)])) == 1


def test_a_knob_tightens_first_then_switches_off_when_the_tune_did_not_take():
    threshold = {"value": 0.80}
    guard = Guard(
        parse_floors(""),
        min_sample=10,
        z=1.645,
        knobs={"cache.l2": Knob(L2_KEY, 0.02, 0.99, 0.80, lambda: threshold["value"])},
    )
    first = guard.observe([verdict(i, False, "cache.l2") for i in range(10)])
    assert [(a.control.kind, a.control.key, a.control.value) for a in first] == [("tune", L2_KEY, 0.82)]
    assert f"revert: jev switch tune {L2_KEY} 0.8" in first[0].alert.message
    threshold["value"] = 0.82  # the cache honoured it
    second = guard.observe([verdict(i, False, "cache.l2") for i in range(10, 20)])
    assert [(a.control.kind, a.control.value) for a in second] == [("tune", 0.84)]
    third = guard.observe([verdict(i, False, "cache.l2") for i in range(20, 30)])  # 0.84 never took effect
    assert [(a.control.kind, a.control.key, a.control.value) for a in third] == [("switch", "cache.l2", False)]


def test_the_cascade_widens_to_its_limit_then_is_switched_off_with_the_beam():
    guard = Guard(parse_floors(""), min_sample=10, z=1.645, knobs={"cascade": Knob(CASCADE_KEY, 2, 4, 0)})
    sent = [
        a.control for i in range(3) for a in guard.observe([verdict(10 * i + j, False, "cascade") for j in range(10)])
    ]
    assert [(c.kind, c.value) for c in sent] == [("tune", 2), ("tune", 4), ("switch", False)]
    assert {"cascade", "beam"} <= guard.off


def test_rules_are_judged_on_labelled_verdicts_only():
    guard = Guard(parse_floors(""), min_sample=10, z=1.645)
    assert guard.observe([verdict(i, False, "rules") for i in range(50)]) == []
    actions = guard.observe([verdict(i, False, "rules", labelled=True) for i in range(50, 60)])
    assert [(a.control.key, a.control.value) for a in actions] == [("score.rules", False)]


def test_good_agreement_is_left_alone():
    guard = Guard(parse_floors(""), min_sample=100, z=1.645)
    assert guard.observe([verdict(i, True, "cache.l1", "distill.time") for i in range(300)]) == []


def test_mechanisms_sharing_a_knob_raise_it_in_turn():
    guard = Guard(
        parse_floors(""), min_sample=10, z=1.645, knobs={m: Knob(CASCADE_KEY, 2, 8, 0) for m in ("cascade", "beam")}
    )
    sent = [
        a.control.value for m in ("cascade", "beam") for a in guard.observe([verdict(i, False, m) for i in range(10)])
    ]
    assert sent == [2, 4]
