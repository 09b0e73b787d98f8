"""The one reservation a request makes before any model work: its worst case held against the leases of its
hard token budgets (streams.runtime.leases, when hard budgets are leased), then against the local book (soft
budgets, alerts, cost). Ingest reserves every request this way; the cache stage its L3 pre-answers."""

from __future__ import annotations

from typing import Protocol

from schemas.records import Work
from streams.budgets.book import BudgetBook, Refused, request_scopes
from streams.budgets.lease_holder import LeaseHold
from streams.idempotency.requests import reservation_key
from streams.models import pricing
from streams.output.chunks import reserved_output

RANKED_OUTPUT_TOKENS = 3  # a ranked decision's output: a token at most from each tier (coarse, fine, escalation)


class Holds(Protocol):
    """Hard budgets' lease client (streams.runtime.leases.LeaseClient) as a request's reservation uses it."""

    async def reserve(self, work: Work, tokens: int) -> LeaseHold | Refused | None: ...

    def release(self, hold: LeaseHold) -> None: ...


def reserve(book, leases, work: Work, hold, input_tokens: int, output_tokens: int):
    """`input_tokens + output_tokens` against the book, after `hold` (what the leases held for this request:
    a LeaseHold, Refused, or None where no hard budget covers it). A hold the book then refuses goes back to
    the leases; a kept one is noted on the Work, so postprocess settles it. Returns the book's Reservation or
    the Refused."""
    if isinstance(hold, Refused):
        return hold
    req = work.request
    held = book.reserve(
        request_scopes(req),
        input_tokens + output_tokens,
        pricing.max_cost(work.model, input_tokens, output_tokens),
        reservation_id=reservation_key(req.tenant, req.request_id),
    )
    if hold is not None and isinstance(held, Refused):
        leases.release(hold)
    elif hold is not None:
        work.budget_holds, work.budget_tokens = hold.leases, hold.tokens
    elif not isinstance(held, Refused) and any(
        (b := book.budgets.get(key)) is not None and b.hard_tokens is not None for key in held.keys
    ):  # a hard budget this process's own book holds (no leases): the decision is kept within its hold all the same
        work.budget_tokens = input_tokens + output_tokens
    return held


def most_output(work: Work, stream_config=None) -> int:
    """The most output tokens a request may spend: a ranked decision's tiers emit a token or so each (its contract's
    max_output_tokens bounds generated text only: held for a ranked decision, it was most of the hold, and a small
    hard budget admitted a request at a time); generated text its contract's maximum or a stream's planned length.
    The scoring engine keeps a hard-budgeted decision within its hold (streams.scoring.engine.held_to)."""
    if work.request.candidates:
        return RANKED_OUTPUT_TOKENS
    return reserved_output(work.request, stream_config)


async def reserve_request(book: BudgetBook, leases: Holds | None, work: Work, stream_config=None):
    """A request's hold: its input and its most output, waiting for the budgets' owners when a lease lacks it."""
    input_tokens, output_tokens = work.context_tokens + sum(work.candidate_tokens), most_output(work, stream_config)
    hold = await leases.reserve(work, input_tokens + output_tokens) if leases is not None else None
    return reserve(book, leases, work, hold, input_tokens, output_tokens)


def prefetch_reserver(book, leases=None):
    """The cache stage's hold on an L3 pre-answer: the requesting tenant's budgets (every scope of the request it
    follows) are reserved for the pre-answer's input + max output, against the leases this process holds now (a
    pre-answer waits for no owner); False = refused, so the pre-answer is not made. Postprocess settles it like
    any request."""

    def reserve_prefetch(work: Work, input_tokens: int) -> bool:
        output_tokens = work.request.contracts.max_output_tokens
        hold = leases.hold_now(work, input_tokens + output_tokens) if leases is not None else None
        return not isinstance(reserve(book, leases, work, hold, input_tokens, output_tokens), Refused)

    return reserve_prefetch
