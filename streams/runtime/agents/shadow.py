"""judge_savings: reads the verdicts topic, stores every verdict in ClickHouse, keeps each mechanism's
agreement in the Prometheus gauge and lets the guard act: its control records go to the control topic (every
process applies them, as it would an operator's) and its alerts to the alerts topic. Its own BatchConsumer
(group settings.verdicts_group), whose Outbox the stage process's Sender delivers before the micro-batch is
committed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import faust

from schemas.records import Verdict
from streams.cache.semantic import SemanticCache
from streams.cache.stage import CacheStage
from streams.core.deadletter import forged, undecodable
from streams.core.metrics import observe_verdicts, set_agreement
from streams.core.outbox import Delivers, Outbox
from streams.core.switches import CASCADE_KEY, DISTILL_KEY, L2_KEY
from streams.distill.work import Distiller
from streams.runtime.consumer import BatchConsumer, serve
from streams.runtime.topics import Topics
from streams.security import signing
from streams.settings import Settings
from streams.shadow.floors import parse_floors
from streams.shadow.guard import Guard, Knob
from streams.shadow.store import Inserts, VerdictStore

L2_STEP, L2_LIMIT = 0.02, 0.99
CASCADE_STEP, CASCADE_LIMIT = 2, 8
DISTILL_STEP, DISTILL_LIMIT = 0.5, 4.0


def build_guard(settings: Settings, cache: CacheStage, distiller: Distiller | None = None) -> Guard:
    """The guard with its knobs: L2's similarity floor (SemanticCache.min_similarity: the learner's floor, or
    the fixed threshold; read back from the cache stage of this process, so a tune it does not honour ends in
    the switch), the cascade's beam widening (honoured by the scoring workers, streams.shadow.tuning) and the
    history budget of distillation's time layer (the Distiller of this process)."""
    knobs = {
        "cascade": Knob(CASCADE_KEY, CASCADE_STEP, CASCADE_LIMIT, 0),
        "beam": Knob(CASCADE_KEY, CASCADE_STEP, CASCADE_LIMIT, 0),
    }
    if distiller is not None:
        knobs["distill.time"] = Knob(DISTILL_KEY, DISTILL_STEP, DISTILL_LIMIT, 1.0, lambda: distiller.scale)
    semantic = cache.semantic
    if isinstance(semantic, SemanticCache):
        knobs["cache.l2"] = Knob(L2_KEY, L2_STEP, L2_LIMIT, semantic.min_similarity, lambda: semantic.min_similarity)
    return Guard(parse_floors(settings.shadow_floors), settings.shadow_min_sample, settings.shadow_confidence_z, knobs)


def read_verdicts(messages: list) -> tuple[list[Verdict], list]:
    """The verdicts of `messages` and the dead letters of the rest: forged_record where Jev did not write one (a
    forged verdict would steer the guard's controls), bad_internal_message where one does not decode."""
    verdicts, rejected = [], []
    for message in messages:
        if reason := signing.check(message):
            rejected.append(forged(message, reason))
            continue
        try:
            verdicts.append(Verdict.loads(message.value))
        except Exception as exc:
            rejected.append(undecodable(message, exc))
    return verdicts, rejected


def register(
    app: faust.App,
    topics: Topics,
    settings: Settings,
    guard: Guard,
    client_ref: Callable[[], Inserts | None],
    sender: Delivers,
) -> BatchConsumer:
    """`client_ref()`: the ClickHouse client of this process's usage sink, or None where it has none."""
    state: dict[str, Any] = {"verdicts": 0, "kept": 0}  # counts, and the verdict store once opened

    def store() -> VerdictStore | None:
        if "store" not in state:
            client = client_ref()
            state["store"] = VerdictStore(client) if client is not None else None
        return state["store"]

    async def judge_savings(messages: list) -> Outbox:
        verdicts, rejected = read_verdicts(messages)
        out = Outbox(dead_letters=rejected)
        if (target := store()) is not None:
            await asyncio.to_thread(target.store, verdicts)
        observe_verdicts(verdicts)
        state["verdicts"] += len(verdicts)
        state["kept"] += sum(v.kept for v in verdicts)
        if state["verdicts"]:
            set_agreement("all", state["kept"] / state["verdicts"])
        actions = guard.observe(verdicts) if settings.shadow_guard else []
        for mechanism, seen in guard.agreement().items():
            if seen["agreement"] is not None:
                set_agreement(mechanism, seen["agreement"])
        for action in actions:
            if action.control is not None:
                control = action.control
                out.records.append(("control", f"{control.kind}:{control.key}".encode(), control.dumps()))
            out.alerts.append(action.alert)
        return out

    return serve(
        app,
        BatchConsumer(
            settings.bootstrap,
            topics.verdicts.get_topic_name(),
            settings.verdicts_group,
            judge_savings,
            settings.stage_batch_max,
            settings.stage_batch_wait_ms,
            sender=sender,
        ),
    )
