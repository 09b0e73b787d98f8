"""Distill many conversations and summarize: shared by `jev distill` and bench/distill.py."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from streams.distill.core import Distilled, distill, last_user_index, normalize
from streams.distill.policy import Policy
from streams.distill.tagger import references


def keeps_last_user(messages: list[dict], result: Distilled) -> bool:
    """True when the last user turn and every turn it refers to are among the kept turns."""
    messages = normalize(messages)
    last = last_user_index(messages)
    if last < 0:
        return True
    return {last} | references(messages, last) <= set(result.kept)


def reduction(result: Distilled) -> float:
    return 1 - result.tokens_after / result.tokens_before if result.tokens_before else 0.0


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


@dataclass
class Summary:
    conversations: int = 0
    kept_last_user: int = 0
    grew: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    reductions: list[float] = field(default_factory=list)
    saved_by_layer: dict[str, int] = field(default_factory=dict)

    def add(self, messages: list[dict], result: Distilled) -> None:
        self.conversations += 1
        self.kept_last_user += keeps_last_user(messages, result)
        self.grew += result.tokens_after > result.tokens_before
        self.tokens_before += result.tokens_before
        self.tokens_after += result.tokens_after
        self.reductions.append(reduction(result))
        for layer, saved in result.saved_by_layer.items():
            self.saved_by_layer[layer] = self.saved_by_layer.get(layer, 0) + saved

    def as_json(self) -> dict:
        return {
            "conversations": self.conversations,
            "median_reduction": round(statistics.median(self.reductions), 4) if self.reductions else 0.0,
            "last_user_kept": round(self.kept_last_user / self.conversations, 4) if self.conversations else 1.0,
            "grew": self.grew,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "reduction_p10": round(quantile(self.reductions, 0.1), 4),
            "reduction_p50": round(quantile(self.reductions, 0.5), 4),
            "reduction_p90": round(quantile(self.reductions, 0.9), 4),
            "saved_by_layer": self.saved_by_layer,
        }


def distill_all(
    conversations: Iterable[list[dict]],
    *,
    model: str,
    budget: int | None,
    policy: Policy,
    switches: Mapping[str, bool],
    now: float,
) -> Iterator[tuple[list[dict], Distilled]]:
    for messages in conversations:
        yield messages, distill(messages, model=model, budget=budget, policy=policy, switches=switches, now=now)
