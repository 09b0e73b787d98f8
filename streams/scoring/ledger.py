"""Per-decision token accounting, attributed per mechanism: one UsageEvent per tier or mechanism.

Actual tokens are exact in the tokenizer of the backend that processed them, with a model server's own count beside
them where it reported one. Nominal tokens follow ONE definition in every mode, every candidate scored by the fine
tier with the context re-sent each time, Σ_i (context + candidate_i), split into sections (rules, cascade, beam,
shared_context, fine, state_cache, escalation, hierarchy), so nominal − actual per section is that mechanism's
saving.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.records import BILLED, SERVER_BILLED, Request, TokenCounters, UsageEvent, Work
from streams.models import pricing
from streams.models.protocol import Scored, Usage
from streams.text import tokens
from streams.usage.events import usage_event


@dataclass
class SectionSpend(TokenCounters):
    """What one section (a tier or mechanism) of a decision spent and would have spent naively. Its server_*
    counters are settled: the server's count, Jev's for a server call that reported none."""

    model: str = ""
    reported: int = 0  # server calls with usage
    unreported: int = 0  # server calls without

    @property
    def count_source(self) -> str:
        """jev (no model-server call), server (every call reported usage), missing (none did: the server columns
        hold Jev's count) or mixed."""
        if not self.reported:
            return "missing" if self.unreported else "jev"
        return "mixed" if self.unreported else "server"

    def settled(self) -> tuple[int, ...]:
        """input, cache_read, output as billed: the server's where it reported, Jev's elsewhere."""
        return tuple(getattr(self, name) for name in (BILLED if self.count_source == "jev" else SERVER_BILLED))

    def count(self, names: tuple[str, ...], counts: tuple[int, ...]) -> None:
        """Add `counts` to the counters `names`, in order."""
        for name, n in zip(names, counts, strict=True):
            setattr(self, name, getattr(self, name) + n)


@dataclass
class Ledger:
    entries: dict[str, SectionSpend] = field(default_factory=dict)

    def add(
        self,
        section: str,
        nominal: int = 0,
        model: str = "",
        scored: Scored | None = None,
        candidates: int = 0,
        beam: int = 0,
    ) -> None:
        entry = self.entries.setdefault(section, SectionSpend())
        entry.model = model or entry.model
        entry.nominal_tokens += nominal
        entry.candidates += candidates
        entry.beam = max(entry.beam, beam)
        if scored is not None:
            jev = (scored.input_tokens, scored.cache_read_tokens, scored.output_tokens)
            entry.count(BILLED, jev)
            if scored.server is not None:
                entry.reported += 1
                server = scored.server
                entry.count(SERVER_BILLED, (server.prompt_tokens, server.cached_tokens, server.completion_tokens))
            elif scored.calls:
                entry.unreported += 1
                entry.count(SERVER_BILLED, jev)

    def add_model_call(self, section: str, nominal: int, model: str, scored: Scored, candidates: int) -> None:
        """A model tier's call, its cache reads split off into `state_cache` with their share of nominal; a server's
        count is split the same way (its cached_tokens go with Jev's claimed cache reads), so each row holds both
        counts of the same tokens."""
        cached = scored.cache_read_tokens
        share = round(nominal * cached / scored.input_tokens) if scored.input_tokens else 0
        server, server_cached = scored.server, None
        if cached and server is not None:
            server_cached = Usage(server.cached_tokens, 0, server.cached_tokens)
            server = Usage(server.prompt_tokens - server.cached_tokens, server.completion_tokens)
        fresh = Scored([], scored.input_tokens - cached, 0, scored.output_tokens, server, scored.calls)
        self.add(section, nominal - share, model, fresh, candidates, candidates)
        if cached:
            self.add("state_cache", share, model, Scored([], cached, cached, 0, server_cached, scored.calls))

    def balance(self, section: str, total_nominal: int) -> None:
        """Attribute whatever nominal the other sections do not account for to `section`."""
        rest = total_nominal - self.nominal
        if rest:
            self.add(section, rest)

    @property
    def actual(self) -> int:
        return sum(e.input_tokens + e.output_tokens for e in self.entries.values())

    @property
    def nominal(self) -> int:
        return sum(e.nominal_tokens for e in self.entries.values())

    def totals(self) -> tuple[int, int, int, float]:
        """input, cache_read, output tokens and cost of the whole decision, as settled (the server's count where a
        server reported one): what the budget reservation settles with."""
        settled = [(e.model, e.settled()) for e in self.entries.values()]
        return (
            sum(s[0] for _, s in settled),
            sum(s[1] for _, s in settled),
            sum(s[2] for _, s in settled),
            sum(pricing.cost(model, *s) for model, s in settled),
        )

    def events(self, request: Request, latency_ms: float, outcome: str, iterations: int) -> list[UsageEvent]:
        return [
            usage_event(
                request,
                "score",
                section=section,
                model=e.model,
                latency_ms=latency_ms,
                outcome=outcome,
                iteration=iterations,
                count_source=e.count_source,
                **e.counters(),
            )
            for section, e in self.entries.items()
        ]


def candidate_lengths(work: Work) -> list[int]:
    return work.candidate_tokens or [tokens.count(c.text, work.model) for c in work.request.candidates]


def nominal_tokens(work: Work, lengths: list[int]) -> int:
    """What a naive system sends: the context once per candidate, Σ_i (context + candidate_i)."""
    return sum(work.context_tokens + n for n in lengths) or work.context_tokens
