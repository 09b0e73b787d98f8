"""An operator lowers a hard budget from 1e9 to 300 tokens while a stage process holds a lease taken under the high
limit (50,000,000 tokens, JEV_BUDGET_LEASE_SHARE 0.05), on the real local broker with the budget owner: the lease
is taken back and the requests after the change reserve at most 300 tokens between them (before: 8 of 8 went
through on the old lease)."""

import asyncio
import time

import pytest

from infra.broker import LocalBroker, create_topics
from schemas.records import Control, Request, Work
from schemas.topics import name
from streams.budgets.book import BudgetBook
from streams.budgets.lease_holder import LeaseHold
from streams.runtime.leases import BudgetOwner, LeaseClient
from tests.security.test_replayed_records import KEY, signed_send


@pytest.fixture
def url(settings):
    from streams.security import signing

    signing.configure(settings)
    with LocalBroker() as broker:
        yield broker.url.removeprefix("kafka://")


def work(i: int) -> Work:
    """A request reserving 65 tokens (45 in, at most 20 out), in English or Chinese."""
    state = "trail shoes" if i % 2 else "越野跑鞋"
    request = Request.from_data(
        {
            "request_id": f"r{i}",
            "tenant": "acme",
            "service": "s",
            "decision_type": "ranking",
            "state": state,
            "contracts": {"max_output_tokens": 20},
        }
    )
    return Work(request=request, admitted_at=time.time(), model="gpt-4o-mini", context_tokens=45)


async def test_a_lowered_hard_budget_takes_back_the_lease_taken_under_the_high_one(url):
    await create_topics(url, [name("budget"), name("leases")], 1)
    book = BudgetBook()
    book.apply(Control(kind="budget", key="tenant:acme", value={"hard_tokens": 10**9}))
    send, producer = await signed_send(url)
    owner = BudgetOwner(url, "lowered", book, send, lease_s=60.0, grace_s=60.0)
    client = LeaseClient(url, "lowered", 1, book, send, share=0.05, lease_s=60.0)
    tasks = [asyncio.create_task(owner.run()), asyncio.create_task(client.run())]
    try:
        assert isinstance(await client.reserve(work(0), 65), LeaseHold)
        assert client.holder.leases[KEY].balance >= 49_000_000  # the slice of 1e9
        book.apply(Control(kind="budget", key="tenant:acme", value={"hard_tokens": 300}))
        held = [await client.reserve(work(i), 65) for i in range(1, 9)]
        through = [h for h in held if isinstance(h, LeaseHold)]
        assert 0 < len(through) < 8
        assert sum(h.tokens for h in through) <= 300
        refused = next(h for h in held if not isinstance(h, LeaseHold))
        assert "hard_tokens 300" in refused.reason
    finally:
        client.stopping.set()
        owner.stopping.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.stop()
