"""What a decision in progress hands the batch driver and gets back: a backend call it waits on (`Call`), and the
order it settles on (`Ranking`).

A decision is a generator (streams.scoring.engine): it yields a Call whenever it needs a model tier and receives
that call's Scored. The driver (streams.scoring.microbatch) gathers the calls of every decision of a micro-batch and
makes one backend call for all of them, so the scoring worker batches across requests, not only within one."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TypeVar

from streams.models.protocol import Scored, Scorer


@dataclass
class Call:
    backend: Scorer
    context: str
    candidates: list[str]
    deadline: float = 0.0  # epoch seconds the call must end by (a model server's retries stay inside it); 0 = none


@dataclass
class Ranking:
    order: list[int]  # candidate indices, best first
    scores: dict[int, float]
    tier: str
    confidence: float
    chain: list[str]


R = TypeVar("R")
Deciding = Generator[Call, Scored, R]  # yields calls, receives their scores, returns its result (an R)
