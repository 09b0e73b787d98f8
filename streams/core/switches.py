"""Kill switches and the process-local view of the control plane (switches, versions, budgets): the state,
no Kafka. streams.runtime.control follows the control topic into a Controls."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from schemas.records import Control

log = logging.getLogger("jev.control")

# The knobs a `tune` control record sets (the shadow guard's, and `jev switch tune`'s), each read by its stage
L2_KEY = "cache.l2.min_similarity"
CASCADE_KEY = "score.cascade.widen"
DISTILL_KEY = "distill.budget_scale"
# Every protection layer that can be switched off at runtime; all are on unless a control record says off.
SWITCHES = {
    "ingest.truncation": "truncate over-contract input by tokens instead of rejecting it",
    "ingest.budgets": "reserve budget before any model work (off: admit without reserving)",
    "distill.semantic": "tag turns and fold chit-chat/venting/boilerplate into placeholders",
    "distill.time": "weight turns by age (TTL) under the token budget",
    "distill.domain": "drop context chunks matching the decision type's exclusion terms",
    "distill.dedup": "send repeated turns and template text once",
    "cache.l1": "exact cache",
    "cache.l2": "semantic cache",
    "cache.l3": "predictive cache",
    "score.rules": "rules tier (zero tokens)",
    "score.cascade": "coarse-to-fine cascade (off: fine tier scores every candidate)",
    "postprocess.cleanup": "strip preambles, closers, debug markers",
    "postprocess.scan": "sensitive-word scan routing hits to review",
    "postprocess.throttle": "token bucket pacing streamed answers (off: chunks go out as fast as generated)",
}


class UnknownSwitch(ValueError):
    def __init__(self, switch: str):
        super().__init__(f"unknown switch {switch!r}; switches are: {', '.join(SWITCHES)}")


class Controls:
    """Process-local view of the control topic. Readers call .on(name); writers go through the topic."""

    def __init__(self):
        self.switches: dict[str, bool] = dict.fromkeys(SWITCHES, True)
        self.versions: dict[str, str] = {}
        self.budgets: dict[str, dict] = {}
        self.listeners: list[Callable[[Control], None]] = []
        self.applied = 0
        self.refused = 0  # records a listener could not take (logged)

    def on(self, switch: str) -> bool:
        return self.switches[switch]

    def apply(self, control: Control) -> None:
        if control.kind == "switch":
            if control.key not in SWITCHES:
                log.warning("ignoring control for %s", UnknownSwitch(control.key))
                return
            self.switches[control.key] = bool(control.value)
        elif control.kind == "version":
            self.versions[control.key] = str(control.value)
        elif control.kind == "budget":
            self.budgets[control.key] = control.value
        for listener in self.listeners:
            try:
                listener(control)
            except Exception as exc:  # one bad record never stops a worker: it is refused, the rest applies
                self.refused += 1
                log.warning(
                    "refusing control record %s:%s=%r: %s; publish a corrected record for this key",
                    control.kind,
                    control.key,
                    control.value,
                    exc,
                )
        self.applied += 1


def switch_record(switch: str, on: bool) -> Control:
    if switch not in SWITCHES:
        raise UnknownSwitch(switch)
    return Control(kind="switch", key=switch, value=on, ts=time.time())
