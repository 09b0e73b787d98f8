"""A hard budget of 400 tokens admitted about one request in six per burst ("no lease with 306 tokens left"): each
ranked request held its contract's max_output_tokens (256) on top of its input, though ranking spends a token or so
of output per model tier. Now a ranked request holds its input and that, on the real local broker with the budget
owner and a lease client, so a burst admits as many requests as their holds fit in the budget and never more; the
scoring engine keeps each such decision within its hold, falling back rather than spending past it."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer

from schemas.records import Candidate, Control, Request
from schemas.topics import name
from streams.budgets.book import BudgetBook, Refused
from streams.budgets.reserve import RANKED_OUTPUT_TOKENS, most_output, reserve_request
from streams.models.lexical import LexicalBackend
from streams.runtime.leases import BudgetOwner, LeaseClient
from streams.scoring import policy, rules
from streams.scoring.engine import Engine
from streams.scoring.factory import work_for
from streams.security import signing
from tests.conftest import fresh_topic

HARD = 400
STATES = (
    "the customer writes that the parcel ordered two weeks ago arrived late and damaged, and asks for a refund",
    "顾客说两周前订购的包裹迟到了而且已经损坏，现在要求全额退款并且希望尽快处理",
)
CANDIDATES = (("a", "refund the late parcel"), ("b", "track the parcel"), ("c", "退款"), ("d", "查询包裹"))


def ranked(i: int):
    """A ranked request of tenant acme, English or Chinese, its tokens counted by the real tokenizer."""
    request = Request(
        request_id=f"r{i}",
        tenant="acme",
        service="s",
        decision_type="ranking",
        state=STATES[i % 2],
        candidates=[Candidate(id=c, text=t) for c, t in CANDIDATES],
    )
    return work_for(request, "gpt-4o-mini")


def hold_of(work) -> int:
    return work.context_tokens + sum(work.candidate_tokens) + RANKED_OUTPUT_TOKENS


async def test_a_burst_on_a_400_token_budget_admits_what_fits(broker):
    bootstrap = await fresh_topic(broker, name("budget"), 1)
    await fresh_topic(broker, name("leases"), 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()

    async def send(topic, values):
        await asyncio.gather(
            *[await producer.send(topic, v, partition=p, headers=signing.headers(topic, v)) for p, v in values]
        )

    book = BudgetBook()
    book.leased_tokens = True
    book.apply(Control(kind="budget", key="tenant:acme", value={"hard_tokens": HARD}))
    owner = BudgetOwner(bootstrap, "small", book, send, lease_s=30.0, grace_s=30.0)
    client = LeaseClient(bootstrap, "small", 1, book, send, share=0.05, lease_s=30.0, wait_s=20.0)
    tasks = [asyncio.create_task(owner.run()), asyncio.create_task(client.run())]
    try:
        works = [ranked(i) for i in range(20)]
        held = await asyncio.gather(*(reserve_request(book, client, w) for w in works))
        admitted = [w for w, h in zip(works, held) if not isinstance(h, Refused)]
        holds = [w.budget_tokens for w in admitted]
        assert holds == [hold_of(w) for w in admitted] and max(holds) < 80  # not input + 256
        fit = HARD // max(holds)  # holds differ by language: at least this many fit
        assert len(admitted) >= fit - 1 >= 4  # a request's hold may lie stranded in the lease's last tokens
        assert sum(holds) <= HARD  # never more than the budget
        refused = next(h for h in held if isinstance(h, Refused))
        assert f"hard_tokens {HARD}" in refused.reason
    finally:
        client.stopping.set()
        owner.stopping.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.stop()


def test_generated_answers_still_hold_their_contracts_output():
    work = ranked(0)
    work.request = Request(request_id="g", tenant="acme", service="s", decision_type="ranking", state=STATES[1])
    assert most_output(work) == work.request.contracts.max_output_tokens


@pytest.mark.parametrize("i", [0, 1])
def test_a_decision_spends_no_more_than_its_hold(i):
    engine = Engine(
        coarse=LexicalBackend(),
        fine=LexicalBackend(),
        config=policy.Config(tiers={}, policies={"ranking": policy.Policy()}, default=policy.Policy()),
        rules=rules.load(),
        mode="fine-only",
    )
    work = ranked(i)
    work.budget_holds, work.budget_tokens = {"tenant:acme": "lease"}, hold_of(work)
    decision, _ = engine.decide(work)
    assert decision.tier == "fine"  # its hold covers its model tier
    work = ranked(i)
    work.budget_holds, work.budget_tokens = {"tenant:acme": "lease"}, hold_of(work) - RANKED_OUTPUT_TOKENS - 5
    decision, _ = engine.decide(work)
    assert decision.tier == "fallback" and decision.chain[0].startswith("fallback:token_cap")


async def test_without_leases_the_book_admits_what_fits_and_marks_the_hold():
    """One stage process checking its own book (JEV_BUDGET_LEASES=0): the same holds, and each admitted work
    carries its hold for the scoring engine's cap."""
    book = BudgetBook()
    book.apply(Control(kind="budget", key="tenant:acme", value={"hard_tokens": HARD}))
    works = [ranked(i) for i in range(20)]
    held = [await reserve_request(book, None, w) for w in works]
    admitted = [w for w, h in zip(works, held) if not isinstance(h, Refused)]
    assert [w.budget_tokens for w in admitted] == [hold_of(w) for w in admitted]
    assert sum(hold_of(w) for w in admitted) <= HARD < sum(hold_of(w) for w in works[: len(admitted) + 1])
