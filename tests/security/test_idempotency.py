"""Budgets hold with reused request ids: a request is idempotent by (tenant, request_id). A redelivery of the same
content spends nothing more and gets the first decision; the same id with other content is rejected
(duplicate_request_id); one tenant's id never borrows another tenant's reservation or usage rows."""

from __future__ import annotations

import asyncio
import time

import orjson

from schemas.records import Control, Decision, Request, WorkBatch
from streams.idempotency.requests import (
    CONFLICT,
    NEW,
    REDELIVERY,
    Requests,
    admitted_record,
    decided_record,
    fingerprint,
)
from streams.runtime.app import create_app
from streams.runtime.usage_sink import UsageSink
from streams.usage.events import usage_event
from tests.conftest import Captured
from tests.streams.runtime.test_agents import REQUEST, eventually, requests, work


def admitted(captured) -> list[str]:
    return [f"{w.request.tenant}/{w.request.request_id}" for b in captured.sent.get("distilled", []) for w in b.items]


def ingest_usage(captured) -> list[str]:
    return [e.event_id for b in captured.sent.get("usage", []) for e in b.events if e.stage == "ingest"]


async def test_forty_requests_under_one_id_spend_once_against_a_hard_budget(app_and_sent):
    """The issue's probe: 40 requests with one request_id and different content were all decided against one
    reservation (2,000 tokens against a hard 400)."""
    app, captured = app_and_sent
    app.controls.apply(Control(kind="budget", key="tenant:acme", value={"hard_tokens": 400}))
    flood = [orjson.dumps({**REQUEST, "state": f"trail shoes, size {i}"}) for i in range(40)]
    await app.ingest.hand_over(requests(flood))
    assert admitted(captured) == ["acme/r1"]
    rejected = captured.sent["rejected"]
    assert len(rejected) == 39 and {r.reason for r in rejected} == {"duplicate_request_id"}
    assert all(r.request_id == "r1" for r in rejected)
    assert "give every new request its own request_id" in rejected[0].detail
    held = app.budgets.open["4:acme/2:r1"]
    assert held.tokens <= 400 and list(app.budgets.open) == ["4:acme/2:r1"]


async def test_a_redelivery_spends_nothing_more_and_gets_the_first_decision(app_and_sent):
    app, captured = app_and_sent
    same = orjson.dumps(REQUEST)
    restamped = orjson.dumps({**REQUEST, "created_at": time.time()})  # a retry may restamp created_at
    await app.ingest.hand_over(requests([same]))
    reserved = app.budgets.open.get("4:acme/2:r1")
    await app.ingest.hand_over(requests([same, restamped]))
    assert admitted(captured) == ["acme/r1"] and ingest_usage(captured) == ["4:acme/2:r1:ingest"]
    assert "rejected" not in captured.sent and app.budgets.open.get("4:acme/2:r1") == reserved
    first = Decision(request_id="r1", tier="fine", action_id="a", input_tokens=40, tenant="acme")
    app.requests.decided("acme", first)
    await app.ingest.hand_over(requests([same]))
    assert captured.sent["decisions"] == [first]  # the first decision again, no new work
    assert admitted(captured) == ["acme/r1"] and ingest_usage(captured) == ["4:acme/2:r1:ingest"]


async def test_one_tenants_request_id_does_not_admit_another_tenant_over_its_budget(app_and_sent):
    """The issue's probe: the same request_id from a second tenant with a 1-token hard budget was decided and
    charged to the first tenant's reservation."""
    app, captured = app_and_sent
    app.controls.apply(Control(kind="budget", key="tenant:globex", value={"hard_tokens": 1}))
    await app.ingest.hand_over(requests([orjson.dumps(REQUEST), orjson.dumps({**REQUEST, "tenant": "globex"})]))
    assert admitted(captured) == ["acme/r1"]
    assert [(r.reason, r.request_id) for r in captured.sent["rejected"]] == [("over_budget", "r1")]
    assert "tenant:globex" in captured.sent["rejected"][0].detail


def test_usage_rows_of_two_tenants_with_one_request_id_are_both_kept(usage_db):
    events = [
        usage_event(Request.from_data({**REQUEST, "tenant": t}), "ingest", input_tokens=10) for t in ("acme", "globex")
    ]
    assert len({e.event_id for e in events}) == 2
    UsageSink(usage_db).insert(events)
    assert usage_db.query(
        "SELECT tenant, sum(input_tokens) FROM usage_events GROUP BY tenant ORDER BY tenant"
    ).result_rows == [("acme", 10), ("globex", 10)]


def test_the_state_is_bounded_and_judges_content_not_key_order():
    seen = Requests(max_entries=2)
    a = orjson.dumps({"request_id": "r", "tenant": "t", "state": "x"})
    assert seen.check("t", "r", a) == (NEW, None)
    assert seen.check("t", "r", b'{"state": "x", "tenant": "t", "request_id": "r"}') == (REDELIVERY, None)
    assert seen.check("t", "r", orjson.dumps({"request_id": "r", "tenant": "t", "state": "y"})) == (CONFLICT, None)
    assert seen.check("u", "r", a)[0] == NEW  # another tenant's id is another request
    seen.check("t", "r2", a)
    assert len(seen.seen) == 2 and fingerprint(a) == fingerprint(a + b" ")


def test_a_fingerprint_the_caller_computed_once_judges_as_the_raw_bytes_do():  # ingest hashes each request once
    a, other = orjson.dumps({"request_id": "r", "tenant": "t", "state": "x"}), b'{"request_id": "r", "state": "y"}'
    with_print, from_raw = Requests(), Requests()
    for raw in (a, a, other):
        assert with_print.check("t", "r", raw, fingerprint(raw)) == from_raw.check("t", "r", raw)
    assert admitted_record("t", "r", a, fingerprint(a)) == admitted_record("t", "r", a)


def test_a_process_that_reads_the_log_knows_what_another_admitted_and_decided():
    """The requests-seen log carries the state across a restart or a rebalance: a decided request's redelivery
    gets the first decision, other content under its id is a conflict, and a request only admitted (its process
    may have died with its work) is admitted again, once."""
    a = orjson.dumps({"request_id": "r", "tenant": "t", "state": "x"})
    first = Decision(request_id="r", tier="fine", action_id="a", input_tokens=40)
    log = [admitted_record("t", "r", a)[1:], decided_record("t", first)[1:], admitted_record("t", "r2", a)[1:]]
    assert {key for key, _ in log} == {b"1:t/1:r", b"1:t/2:r2"}
    restarted = Requests()
    for _, value in log:
        restarted.apply(value)
    verdict, again = restarted.check("t", "r", b'{"state": "x", "tenant": "t", "request_id": "r"}')
    assert verdict == REDELIVERY and again.to_representation() == first.to_representation()
    assert restarted.check("t", "r", orjson.dumps({"request_id": "r", "tenant": "t", "state": "y"})) == (CONFLICT, None)
    assert restarted.check("t", "r2", a) == (NEW, None)
    assert restarted.check("t", "r2", a) == (REDELIVERY, None)  # now in flight here
    restarted.apply(admitted_record("t", "r2", orjson.dumps({"other": 1}))[2])  # its own record read back later
    assert restarted.check("t", "r2", a) == (REDELIVERY, None)


async def test_ingest_and_postprocess_write_the_log_a_restarted_process_answers_from(app_and_sent, settings):
    app, captured = app_and_sent
    same = orjson.dumps(REQUEST)
    await app.ingest.hand_over(requests([same]))
    first = Decision(request_id="r1", tier="fine", action_id="a", input_tokens=40)
    async with app.faust.agents["format_decision"].test_context() as agent:
        await agent.put(WorkBatch(items=[work(first)]))
    log = captured.sent["requests_seen"]
    assert [key for key, _ in log] == [b"4:acme/2:r1", b"4:acme/2:r1"]
    restarted, after = (
        Captured(),
        create_app(
            settings.replace(broker="kafka://127.0.0.1:9", budget_leases=0),
            {"ranking", "risk_interception"},
            sink=object(),
            sender=Captured(),
        ),
    )
    after.ingest.sender = restarted
    for _, value in log:
        after.requests.apply(value)
    await after.ingest.hand_over(requests([same]))
    assert [d.request_id for d in restarted.sent["decisions"]] == ["r1"] and "distilled" not in restarted.sent
    assert restarted.sent["decisions"][0].action_id == captured.sent["decisions"][0].action_id
    assert "usage" not in restarted.sent and not after.budgets.open  # no reservation, no usage: no spend


async def test_work_decided_before_is_not_decided_again_when_it_is_read_again(app_and_sent):
    """At-least-once: a stage process restarted after a kill reads its uncommitted scored work again. A request
    whose decision is known (sent by this process, or read from the requests-seen log) is not decided again: its
    first decision is sent again as it was (it may not have landed before the kill), with no settlement or usage."""
    app, captured = app_and_sent
    await app.ingest.hand_over(requests([orjson.dumps(REQUEST)]))
    scored = Decision(request_id="r1", tier="fine", action_id="a", input_tokens=40)
    async with app.faust.agents["format_decision"].test_context() as agent:
        for _ in range(2):
            await agent.put(WorkBatch(items=[work(scored)]))
        await eventually(lambda: len(captured.sent.get("decisions", [])) == 2)
        await asyncio.sleep(0.5)  # a second decision would land now
    sent = captured.sent["decisions"]
    assert [d.request_id for d in sent] == ["r1", "r1"] and sent[0].to_representation() == sent[1].to_representation()
    assert [e.stage for b in captured.sent["usage"] for e in b.events].count("postprocess") == 1
    assert [key for key, _ in captured.sent["requests_seen"]] == [b"4:acme/2:r1", b"4:acme/2:r1"]  # admitted, decided


def test_a_compacted_log_keeps_the_content_of_a_decided_request():
    """The requests-seen topic is compacted (one record per key): the decided record alone stands for a request,
    so it carries the content fingerprint too, and other content under the id is still a conflict."""
    a = orjson.dumps({"request_id": "r", "tenant": "t", "state": "x"})
    writer = Requests()
    writer.check("t", "r", a)
    first = Decision(request_id="r", tier="fine", action_id="a")
    _, _, latest = writer.decided("t", first)
    restarted = Requests()
    restarted.apply(latest)
    assert restarted.check("t", "r", orjson.dumps({"request_id": "r", "tenant": "t", "state": "y"})) == (CONFLICT, None)
    assert restarted.check("t", "r", a) == (REDELIVERY, first)


def test_after_the_broker_lost_its_logs_an_undecided_request_is_admitted_again():
    """A broker that restarted without its data may have lost the work of requests admitted here: their
    redelivery is admitted again (not left waiting for a decision that may never come); decided ones are not."""
    seen = Requests()
    a, b = (orjson.dumps({"request_id": r, "tenant": "t", "state": "x"}) for r in ("r", "r2"))
    assert seen.check("t", "r", a) == seen.check("t", "r2", b) == (NEW, None)
    first = Decision(request_id="r", tier="fine", action_id="a", input_tokens=40)
    seen.decided("t", first)
    assert seen.check("t", "r2", b) == (REDELIVERY, None)  # in flight here
    seen.orphan_undecided()
    assert seen.check("t", "r2", b) == (NEW, None)
    assert seen.check("t", "r2", b) == (REDELIVERY, None)  # in flight again, once
    verdict, again = seen.check("t", "r", a)
    assert verdict == REDELIVERY and again == first


async def test_a_request_answered_in_ingest_writes_one_log_record_that_still_answers_its_redelivery(
    app_and_sent, settings, monkeypatch
):
    """Admitted and decided in one outbox (a rule match answered where it was admitted), a request writes only its
    decided record, which carries the fingerprint: a restarted process fed that log sends the first decision to
    a redelivery and refuses other content under the id. A request that goes on writes its admitted record."""
    from faust.types import TP

    app, captured = app_and_sent
    distilled = app.topics.distilled.get_topic_name()
    held = {TP(distilled, p) for p in range(app.faust.conf.topic_partitions)}
    monkeypatch.setattr(app.faust.assignor, "assigned_actives", lambda: held)
    risky = orjson.dumps(
        {
            "request_id": "x1",
            "tenant": "acme",
            "service": "pay",
            "decision_type": "risk_interception",
            "state": {"risk_score": 0.99, "amount": 5000, "备注": "新设备"},
            "candidates": [{"id": "allow", "text": "放行"}, {"id": "block", "text": "拦截"}],
        }
    )
    onward = orjson.dumps({**REQUEST, "request_id": "r2", "state": "越野跑鞋"})
    await app.ingest.hand_over(requests([risky, onward]))
    [decision] = captured.sent["decisions"]
    assert (decision.request_id, decision.tier) == ("x1", "rules")
    log = captured.sent["requests_seen"]
    assert [key for key, _ in log] == [b"4:acme/2:r2", b"4:acme/2:x1"]
    records = {key: orjson.loads(value) for key, value in log}
    assert "decision" not in records[b"4:acme/2:r2"] and records[b"4:acme/2:r2"]["fingerprint"]
    assert records[b"4:acme/2:x1"]["decision"]["action_id"] == "block"
    assert records[b"4:acme/2:x1"]["fingerprint"] == fingerprint(risky).hex()
    restarted = Requests()
    for _, value in log:
        restarted.apply(value)
    verdict, first = restarted.check("acme", "x1", risky)
    assert verdict == REDELIVERY and first.action_id == "block"
    assert restarted.check("acme", "x1", orjson.dumps({**orjson.loads(risky), "state": {"risk_score": 0.1}})) == (
        CONFLICT,
        None,
    )
