"""Tune controls the scoring engine honours: the guard widens the cascade's beam when it disagrees too often.

`score.cascade.widen` = N adds N to every policy's coarse_k_min and coarse_k_max (the coarse tier keeps N more
candidates for the fine tier); 0 restores the configured beams. Applied to the engine's configuration in
every scoring worker, from the control topic, without a restart.
"""

from __future__ import annotations

import dataclasses
import logging

from streams.core.switches import CASCADE_KEY
from streams.scoring import policy as policy_mod

log = logging.getLogger("jev.shadow")


def widened(config: policy_mod.Config, by: int) -> policy_mod.Config:
    def widen(pol: policy_mod.Policy) -> policy_mod.Policy:
        return dataclasses.replace(pol, coarse_k_min=pol.coarse_k_min + by, coarse_k_max=pol.coarse_k_max + by)

    return policy_mod.Config(
        tiers=config.tiers,
        default=widen(config.default),
        policies={name: widen(p) for name, p in config.policies.items()},
    )


class EngineTuning:
    """A Controls listener holding the engine's configured policies, re-widened on each tune control."""

    def __init__(self, engine):
        self.engine, self.base = engine, engine.config

    def on_control(self, control) -> None:
        if control.kind != "tune" or control.key != CASCADE_KEY:
            return
        try:
            by = int(control.value)
        except (TypeError, ValueError):
            log.warning("ignoring %s=%r: expected a whole number of candidates", CASCADE_KEY, control.value)
            return
        self.engine.config = widened(self.base, max(0, by))
