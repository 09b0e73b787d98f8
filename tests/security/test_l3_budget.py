"""L3 pre-answers spend inside the book: each holds the requesting tenant's budget before any model work (none
is made once the budget is spent), and the follow-up model is per tenant, so one tenant's questions never
shape another tenant's pre-answers."""

from __future__ import annotations

from schemas.records import Control, Request, Work
from streams.budgets.book import BudgetBook
from streams.budgets.reserve import prefetch_reserver
from streams.cache.predictive import TenantFollowups
from streams.cache.stage import PREFETCH_MIN_SEEN, CacheStage
from streams.idempotency.requests import reservation_key
from streams.text import tokens

SWITCHES = {"cache.l1": True, "cache.l2": True, "cache.l3": True}
FIRST, NEXT = "where is my parcel right now", "when will my parcel be delivered"


def ask(tenant: str, session: str, question: str, n: int) -> Work:
    request = Request(
        request_id=f"{tenant}-{session}-{n}",
        tenant=tenant,
        service="support",
        decision_type="customer_service",
        state=question,
        session_id=session,
    )
    return Work(
        request=request,
        admitted_at=0.0,
        model="gpt-4o-mini",
        context=question,
        context_tokens=tokens.count(question, "gpt-4o-mini"),
    )


def teach(stage: CacheStage, tenant: str, sessions: int) -> list[Work]:
    """`sessions` sessions of tenant ask FIRST then NEXT; then one more asks FIRST: the pre-answers it gets."""
    for s in range(sessions):
        for n, question in enumerate((FIRST, NEXT)):
            stage.prefetches(ask(tenant, f"s{s}", question, n), SWITCHES)
    return stage.prefetches(ask(tenant, "fresh", FIRST, 0), SWITCHES)


def stage_with(book: BudgetBook, settings) -> CacheStage:
    stage = CacheStage({}, settings.replace(cache_embedder="hashing"))
    stage.reserve = prefetch_reserver(book)
    return stage


def test_a_pre_answer_reserves_the_requesting_tenants_budget_first(settings):
    book = BudgetBook()
    stage = stage_with(book, settings)
    made = teach(stage, "acme", PREFETCH_MIN_SEEN)
    assert [w.request.state for w in made] == [NEXT]
    key = reservation_key("acme", made[0].request.request_id)
    assert key not in book.open  # no budget covers acme: nothing held, nothing refused
    book.apply(Control(kind="budget", key="tenant:globex", value={"hard_tokens": 5}))
    starved = stage_with(book, settings)
    assert teach(starved, "globex", PREFETCH_MIN_SEEN) == []  # over its hard budget: no pre-answer, no model work
    book.apply(Control(kind="budget", key="tenant:initech", value={"hard_tokens": 100_000}))
    funded = stage_with(book, settings)
    made = teach(funded, "initech", PREFETCH_MIN_SEEN)
    held = book.open[reservation_key("initech", made[0].request.request_id)]
    assert held.tokens >= made[0].request.contracts.max_output_tokens
    assert any(k.startswith("tenant:initech") for k in held.keys)


def test_the_follow_up_model_is_per_tenant(settings):
    stage = stage_with(BudgetBook(), settings)
    assert teach(stage, "acme", PREFETCH_MIN_SEEN)  # acme's pattern pre-answers for acme
    assert stage.prefetches(ask("globex", "g1", FIRST, 0), SWITCHES) == []  # and for nobody else
    followups = TenantFollowups()
    followups.of("acme").observe("s", FIRST)
    followups.of("acme").observe("s", NEXT)
    assert followups.of("acme").likely_next(FIRST) and not followups.of("globex").likely_next(FIRST)


def test_with_leased_hard_budgets_a_pre_answer_takes_only_what_this_processs_lease_holds(settings):
    """Where hard budgets are leased (several stage processes), a pre-answer holds its tokens on the lease this
    process has now, asks no owner (it is not worth a wait), and carries the hold for postprocess to settle."""
    import time

    from streams.runtime.leases import LeaseClient

    async def send(topic, values):
        raise AssertionError("a pre-answer asks no owner for a lease")

    book = BudgetBook()
    book.leased_tokens = True
    book.apply(Control(kind="budget", key="tenant:initech", value={"hard_tokens": 100_000}))
    leases = LeaseClient("127.0.0.1:9", "l3", 4, book, send, share=0.25, lease_s=60.0)
    assert teach(stage_of(book, leases, settings), "initech", PREFETCH_MIN_SEEN) == []  # no lease yet: none made
    leases.holder.on_grant("tenant:initech@day", "lease-1", "w", 50_000, time.time() + 60)
    made = teach(stage_of(book, leases, settings), "initech", PREFETCH_MIN_SEEN)
    assert [w.request.state for w in made] == [NEXT]
    assert made[0].budget_holds == {"tenant:initech@day": "lease-1"}
    assert leases.holder.leases["tenant:initech@day"].balance == 50_000 - made[0].budget_tokens


def stage_of(book: BudgetBook, leases, settings) -> CacheStage:
    stage = CacheStage({}, settings.replace(cache_embedder="hashing"))
    stage.reserve = prefetch_reserver(book, leases)
    return stage
