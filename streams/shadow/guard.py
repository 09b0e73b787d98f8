"""The guard: each mechanism's agreement against its floor, and what Jev does when it falls below.

Once a mechanism has `min_sample` verdicts in its window and the Wilson lower bound of the share it kept is under
its floor, the guard tightens its knob or switches it off, as a control record an operator can revert, with an
alert naming the revert. Rules, breakers and budgets override the model on purpose, so only labelled verdicts judge
them.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from schemas.records import Alert, Control, Verdict
from streams.shadow.mechanisms import DISTILL_LAYERS

SWITCH_OF = {
    "cache.l1": "cache.l1",
    "cache.l2": "cache.l2",
    "cache.l3": "cache.l3",
    "rules": "score.rules",
    "cascade": "score.cascade",
    "beam": "score.cascade",
    "truncation": "ingest.truncation",
    "cleanup": "postprocess.cleanup",
    **{f"distill.{layer}": f"distill.{layer}" for layer in DISTILL_LAYERS},
}
# Mechanisms that override the model on purpose (a business rule, a breaker's fallback, a budget's degrade):
# disagreeing with the naive model is what they are for, so only labelled verdicts (accuracy) judge them.
LABELLED_ONLY = {"rules", "breakers", "budget"}


def wilson_lower(kept: int, n: int, z: float) -> float:
    """Lower end of the Wilson score interval of kept/n (0 without verdicts)."""
    if n == 0:
        return 0.0
    p = kept / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n))


@dataclass
class Knob:
    """A mechanism's tightening control: `key` raised by `step` up to `limit`. `current()` reads the value in
    effect where this process can see it (None: unknown, so what the guard sent last is taken as in effect)."""

    key: str
    step: float
    limit: float
    start: float
    current: Callable[[], float | None] = lambda: None


@dataclass
class Action:
    control: Control | None  # None: no switch or knob to act with, the alert alone
    alert: Alert


@dataclass
class Guard:
    floors: dict[str, float]
    min_sample: int
    z: float
    knobs: dict[str, Knob] = field(default_factory=dict)
    window: int = 1000
    state: dict[str, deque] = field(default_factory=dict)  # per mechanism: kept or not, since its last action
    off: set[str] = field(default_factory=set)  # mechanisms this guard switched off (until switched on again)
    values: dict[str, float] = field(default_factory=dict)  # knob values in effect: sent here or seen on the topic
    sent: dict[str, float] = field(default_factory=dict)  # knob values this guard sent last

    def judged(self, mechanism: str) -> deque:
        if mechanism not in self.state:
            self.state[mechanism] = deque(maxlen=self.window)
        return self.state[mechanism]

    def agreement(self) -> dict[str, dict]:
        """Per mechanism in its current window: verdicts, kept, the share kept and its lower bound, the floor."""
        out = {}
        for mechanism, window in sorted(self.state.items()):
            n, kept = len(window), sum(window)
            out[mechanism] = {
                "verdicts": n,
                "kept": kept,
                "agreement": kept / n if n else None,
                "lower": wilson_lower(kept, n, self.z),
                "floor": self.floors.get(mechanism),
            }
        return out

    def observe(self, verdicts: list[Verdict], now: float | None = None) -> list[Action]:
        now = time.time() if now is None else now
        actions = []
        for verdict in verdicts:
            for mechanism in verdict.mechanisms:
                if (
                    mechanism in self.off
                    or mechanism not in self.floors
                    or (mechanism in LABELLED_ONLY and not verdict.labelled)
                ):
                    continue
                window = self.judged(mechanism)
                window.append(bool(verdict.kept))
                n, kept = len(window), sum(window)
                lower = wilson_lower(kept, n, self.z)
                if n >= self.min_sample and lower < self.floors[mechanism]:
                    window.clear()
                    actions.append(self.act(mechanism, kept, n, lower, now))
        return actions

    def act(self, mechanism: str, kept: int, n: int, lower: float, now: float) -> Action:
        floor = self.floors[mechanism]
        why = (
            f"shadow agreement of {mechanism}: {kept}/{n} kept ({kept / n:.1%}), lower bound {lower:.3f} "
            f"under its floor {floor}"
        )
        knob = self.knobs.get(mechanism)
        if knob is not None:
            seen = knob.current()
            in_effect = self.values.get(knob.key, knob.start) if seen is None else seen
            took = seen is None or knob.key not in self.sent or seen >= self.sent[knob.key] - 1e-9
            tighter = round(in_effect + knob.step, 6)
            if took and tighter <= knob.limit + 1e-9:
                self.sent[knob.key] = self.values[knob.key] = tighter
                control = Control(kind="tune", key=knob.key, value=tighter, ts=now)
                return Action(
                    control,
                    self.alert(
                        mechanism,
                        f"{why}: {knob.key} raised {in_effect:g} -> {tighter:g}; "
                        f"revert: jev switch tune {knob.key} {in_effect:g}",
                        "warning",
                        lower,
                        floor,
                        now,
                    ),
                )
        switch = SWITCH_OF.get(mechanism)
        if switch is None:
            return Action(
                None,
                self.alert(
                    mechanism,
                    f"{why}; it has no knob or switch: look at its verdicts in shadow_verdicts",
                    "warning",
                    lower,
                    floor,
                    now,
                ),
            )
        self.off.add(mechanism)
        for other, sw in SWITCH_OF.items():  # mechanisms sharing the switch (cascade, beam) are off with it
            if sw == switch:
                self.off.add(other)
        control = Control(kind="switch", key=switch, value=False, ts=now)
        return Action(
            control,
            self.alert(
                mechanism,
                f"{why}: switched {switch} off; revert: jev switch set {switch} on",
                "critical",
                lower,
                floor,
                now,
            ),
        )

    @staticmethod
    def alert(mechanism: str, message: str, severity: str, lower: float, floor: float, now: float) -> Alert:
        return Alert(
            rule="shadow_agreement",
            severity=severity,
            scope=mechanism,
            message=message,
            value=round(lower, 4),
            threshold=floor,
            query=f"SELECT * FROM agreement_by_mechanism_day WHERE mechanism = '{mechanism}'",
            ts=now,
        )

    def on_control(self, control: Control) -> None:
        """Follow the control topic: tune values in effect (an operator's tune counts as sent: the next
        tightening starts from it); a switch turned on again (an operator's revert) puts its mechanisms back
        under judgement with a fresh window."""
        if control.kind == "tune" and isinstance(control.value, (int, float)):
            self.values[control.key] = self.sent[control.key] = float(control.value)
        elif control.kind == "switch" and bool(control.value):
            for mechanism, switch in SWITCH_OF.items():
                if switch == control.key and mechanism in self.off:
                    self.off.discard(mechanism)
                    self.judged(mechanism).clear()
