"""Warming a scoring engine before it takes traffic, as a serving system does.

A model's first call pays for what loading left undone, and the batch driver orders calls by each backend's
measured pace, which it learns only from a call. So before a worker says it is ready, the engine decides a small
decision of every type in English and Chinese, twice, on an unmetered copy with the encoding cache off: no counts,
breaker trips, cached encodings or tokens are left behind. Model-server tiers are not warmed (calls are billed).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter

from schemas.records import Candidate, Request, Work
from streams.core import encodings
from streams.scoring.factory import work_for

log = logging.getLogger(__name__)
PASSES = 2
SAMPLES = {
    "en": (
        "The parcel I ordered ten days ago has still not arrived; order 4417, can you check where it is?",
        [
            "Track the parcel and tell the customer where it is and when it will arrive",
            "Refund the customer to the original payment method",
            "Exchange the item for another size",
            "Send the missing part again at the shop's cost",
            "Issue an electronic invoice",
            "Hand the complaint to a specialist and apologise",
        ],
    ),
    "zh": (
        "我十天前买的蓝牙耳机到现在还没到，订单号4417，能帮我查一下物流吗？",
        [
            "查询物流，告诉顾客包裹现在的位置和预计送达时间",
            "为顾客办理退款，款项原路退回",
            "为顾客办理换货，寄回后发出新尺码",
            "补发缺少的配件，运费由商家承担",
            "为顾客开具电子发票，说明抬头和税号的填写方法",
            "转交投诉专员处理，并向顾客致歉",
        ],
    ),
}


def samples(decision_types: list[str], model: str) -> list[Work]:
    """One warm-up decision per decision type and language."""
    return [
        work_for(
            Request(
                request_id=f"warm-up/{kind}/{lang}",
                tenant="warm-up",
                service="warm-up",
                decision_type=kind,
                state=state,
                candidates=[Candidate(id=f"c{i}", text=t) for i, t in enumerate(texts)],
            ),
            model,
        )
        for kind in decision_types
        for lang, (state, texts) in SAMPLES.items()
    ]


def warm(engine, model: str = "gpt-4o-mini") -> float:
    """Decide the samples on a copy of `engine` (PASSES times); the seconds it took."""
    began = time.perf_counter()
    copy = dataclasses.replace(
        engine, escalation=None, generator=None, chunk_sink=None, counters=Counter(), metered=False
    )
    works = [
        w for w in samples(sorted(engine.config.policies), model) if not getattr(copy.fine_for(w), "remote", False)
    ]
    with encodings.using(encodings.EncodingCache(0)):
        for _ in range(PASSES):
            copy.decide_batch(works)
    seconds = time.perf_counter() - began
    log.info("scoring engine warmed in %.2f s (%d decisions, %d passes)", seconds, len(works), PASSES)
    return seconds
