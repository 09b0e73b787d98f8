"""The generator router: a generate request goes to a channel of the model pool (fast, balanced, precise) chosen by
its difficulty (context tokens, a creative question), its latency budget and its remaining budget (a degraded
request takes the cheapest channel and never escalates). The validator sends a low-confidence answer (under the
decision type's `escalate_below`) to the next channel up and meters both calls. JEV_GENERATOR with several pool
names builds the router; one name is a single generator.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.records import Work
from streams.models.pool import CHANNELS
from streams.models.protocol import Generated, Generator, Streaming


@dataclass
class Router:
    channels: dict[str, Generator]  # channel → generator
    balanced_from: int = 400
    precise_from: int = 1500
    fast_deadline_ms: int = 2000
    name: str = "router"
    label: str = "llm"

    def __post_init__(self):
        unknown = set(self.channels) - set(CHANNELS)
        if unknown or not self.channels:
            raise ValueError(f"router channels must be among {', '.join(CHANNELS)}; got {sorted(self.channels)}")

    @property
    def model(self) -> str:
        return self.first().model

    def first(self) -> Generator:
        return self.channels[self.available()[0]]

    def available(self) -> list[str]:
        return [c for c in CHANNELS if c in self.channels]

    def nearest(self, wanted: str) -> str:
        have = self.available()
        rank = CHANNELS.index(wanted)
        above = [c for c in have if CHANNELS.index(c) >= rank]
        return above[0] if above else have[-1]

    def route(self, work: Work) -> str:
        """The channel a request starts on."""
        req = work.request
        if work.tier_cap or (0 < req.deadline_ms < self.fast_deadline_ms):
            return self.available()[0]
        step = 2 if work.context_tokens > self.precise_from else 1 if work.context_tokens > self.balanced_from else 0
        if req.question_type in ("creative",):
            step += 1
        return self.nearest(CHANNELS[min(step, len(CHANNELS) - 1)])

    def escalation(self, work: Work, channel: str) -> str | None:
        """The next channel up for a low-confidence answer; None when there is none or the request may not spend."""
        if work.tier_cap or (0 < work.request.deadline_ms < self.fast_deadline_ms):
            return None
        higher = [c for c in self.available() if CHANNELS.index(c) > CHANNELS.index(channel)]
        return higher[0] if higher else None

    def generate(self, prompt: str, max_tokens: int) -> Generated:
        """Outside a request (batch jobs): the cheapest channel."""
        return self.first().generate(prompt, max_tokens)

    def stream(self, prompt: str, max_tokens: int) -> Streaming:
        return self.first().stream(prompt, max_tokens)


def for_work(generator: Generator, work: Work) -> Generator:
    """The generator that answers `work`: the routed channel's, or the generator itself when it is no router."""
    return generator.channels[generator.route(work)] if isinstance(generator, Router) else generator
