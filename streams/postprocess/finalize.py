"""Turn a scored Work into the Decision the caller receives."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from schemas.records import Decision, UsageEvent, Work
from streams.output.chunks import streamed
from streams.output.patterns import Patterns, resolve
from streams.postprocess.contracts import enforce
from streams.usage.events import usage_event


@dataclass
class Finalized:
    decision: Decision
    review: bool = False  # True: route to the review topic instead of the caller
    flagged: bool = False  # sensitive words found
    usage: list[UsageEvent] = field(default_factory=list)
    patterns_version: str = ""  # cleanup patterns a generated text went through ("" = no text)

    @property
    def cacheable(self) -> bool:
        """Flagged or failed output never goes into a cache."""
        return not self.flagged and not self.decision.error


def finalize(
    work: Work,
    now: float | None = None,
    *,
    config: Patterns | str | None = None,
    regenerate: Callable[[str], str] | None = None,
    switches: Mapping[str, bool] | None = None,
) -> Finalized:
    """Stamp latency; for a generated answer, clean it under the request's output contracts (a streamed
    answer was cleaned as it was generated and already went out as chunks: it is only scanned).

    `regenerate(instruction) -> str` (optional) is the generation backend, asked once for a longer
    answer when the text is below contracts.min_output_tokens.
    """
    now = time.time() if now is None else now
    decision = work.decided()
    decision.latency_ms = round((now - work.admitted_at) * 1000, 3)
    done = Finalized(
        decision,
        usage=[usage_event(work.request, "postprocess", latency_ms=decision.latency_ms, outcome=decision.tier)],
    )
    switches = switches or {}
    if decision.text and switches.get("postprocess.cleanup", True) and not streamed(decision):
        _clean_text(work, done, config, regenerate)
    elif decision.text and switches.get("postprocess.scan", True) and resolve(config).scanner.scan(decision.text):
        _flag(done)
    if done.flagged and not switches.get("postprocess.scan", True):
        done.review = False  # the scan is switched off: the caller gets it; it still never enters a cache
        decision.chain.append("review:skipped")
    return done


def _flag(done: Finalized) -> None:
    done.flagged = done.review = True
    done.decision.chain.append("review:sensitive")


def _clean_text(work: Work, done: Finalized, config, regenerate) -> None:
    request, decision = work.request, done.decision
    contracts = request.contracts
    result = enforce(
        decision.text,
        model=work.model,
        max_tokens=contracts.max_output_tokens,
        min_tokens=contracts.min_output_tokens,
        regenerate=regenerate,
        config=config,
    )
    cleaned = result.cleaned
    decision.text = cleaned.text
    decision.chain = [*decision.chain, f"postprocess:{result.outcome}"]
    if cleaned.flagged:
        _flag(done)
    done.patterns_version = cleaned.version
    # Each event's nominal − actual is the saving of its stage: cleanup spends no model tokens and saves
    # the tokens it removed from what the caller would otherwise receive (and re-send).
    done.usage.append(
        usage_event(
            request,
            "postprocess",
            section="cleanup",
            model=work.model,
            nominal_tokens=max(0, cleaned.tokens_before - cleaned.tokens_after),
            outcome=result.outcome,
        )
    )
    if result.retried:  # the retry is new generation: priced here, where it was asked for
        done.usage.append(
            usage_event(
                request,
                "postprocess",
                section="retry",
                model=work.model,
                output_tokens=result.retry_tokens,
                outcome=result.outcome,
            )
        )
