"""Each stage agent in Faust's test_context: no broker needed, everything sent captured by one fake sender."""

import asyncio
import time

import orjson
from aiokafka import TopicPartition

from schemas.records import Decision, Request, UsageBatch, Work, WorkBatch
from schemas.topics import name
from streams.cache.entry import Entry
from streams.runtime.app import create_app
from tests.conftest import Captured, consumed

REQUEST = {
    "request_id": "r1",
    "tenant": "acme",
    "service": "search",
    "decision_type": "ranking",
    "state": "trail shoes",
    "candidates": [{"id": "a", "text": "trail shoe"}, {"id": "b", "text": "loafer"}],
}


def requests(values: list[bytes]) -> list:
    return consumed(name("requests"), values)


async def eventually(condition, timeout: float = 10.0) -> None:
    """The cache agent embeds in a worker thread: wait for its output before leaving test_context."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the agent produced nothing in time"
        await asyncio.sleep(0.01)


async def test_ingest_admits_good_and_dead_letters_bad(app_and_sent):
    app, captured = app_and_sent
    await app.ingest.hand_over(requests([orjson.dumps(REQUEST), b"{broken"]))
    rejected = captured.sent["rejected"]
    assert [r.reason for r in rejected] == ["bad_json"]
    admitted = [w for batch in captured.sent["distilled"] for w in batch.items]
    assert [w.request.request_id for w in admitted] == ["r1"]
    assert admitted[0].context_tokens > 0 and admitted[0].cache_key
    usage = [e for batch in captured.sent["usage"] for e in batch.events]
    assert [(e.stage, e.event_id) for e in usage] == [("ingest", "4:acme/2:r1:ingest")]


async def test_ingest_admits_a_redelivery_again_once_its_consumer_saw_the_broker_lose_its_log(app_and_sent):
    """A request admitted and not yet decided when the broker restarted without its data: its work may be lost
    with the broker's logs. Until then a redelivery is dropped (its first admission is in flight); once ingest's
    own consumer saw the restart, before it reads the new log, the redelivery is admitted again, whether or not
    the requests-seen follower has noticed yet."""
    app, captured = app_and_sent
    raw = orjson.dumps(REQUEST)

    def admitted() -> list[str]:
        return [w.request.request_id for batch in captured.sent["distilled"] for w in batch.items]

    await app.ingest.hand_over(requests([raw]))
    await app.ingest.hand_over(requests([raw]))
    assert admitted() == ["r1"]
    app.ingest.on_log_restart(TopicPartition(name("requests"), 0))
    await app.ingest.hand_over(requests([raw]))
    assert admitted() == ["r1", "r1"]


async def test_ingest_admits_and_sends_on_the_requests_with_a_deadline_before_the_rest_of_the_batch(app_and_sent):
    app, captured = app_and_sent
    plain = [orjson.dumps({**REQUEST, "request_id": f"p{i}"}) for i in range(20)]
    checkouts = [
        orjson.dumps(
            {
                **REQUEST,
                "request_id": rid,
                "decision_type": "risk_interception",
                "state": {"risk_score": 0.5},
                "deadline_ms": ms,
            }
        )
        for rid, ms in (("late", 900), ("soon", 300))
    ]
    await app.ingest.hand_over(requests(plain[:7] + checkouts[:1] + plain[7:] + checkouts[1:]))
    first, then = captured.outboxes
    assert [w.request.request_id for w in first.work["distilled"]] == ["soon", "late"]
    assert [w.request.request_id for w in then.work["distilled"]] == [f"p{i}" for i in range(20)]
    assert {e.request_id for e in first.usage} == {"soon", "late"}
    assert max(w.admitted_at for w in first.work["distilled"]) <= min(w.admitted_at for w in then.work["distilled"])


def work(decision=None) -> Work:
    return Work(
        request=Request.from_data(REQUEST),
        admitted_at=0.0,
        model="gpt-4o-mini",
        context="State: trail",
        context_tokens=4,
        candidate_tokens=[2, 1],
        cache_key="k1",
        decision=decision,
    )


async def test_ingest_rejects_a_tenant_over_its_rate_with_a_retry_after_and_orders_tenants_fairly(settings):
    app = create_app(
        settings.replace(broker="kafka://127.0.0.1:9", budget_leases=0, tenant_rates="flood=3:0"),
        {"ranking"},
        sink=object(),
        sender=(captured := Captured()),
    )
    flood = [orjson.dumps({**REQUEST, "tenant": "flood", "request_id": f"f{i}"}) for i in range(10)]
    others = [
        orjson.dumps({**REQUEST, "tenant": tenant, "request_id": f"{tenant}-1", "state": "跑鞋 trail"})
        for tenant in ("acme", "阿里")
    ]
    await app.ingest.hand_over(requests(flood + others))
    admitted = [w.request for batch in captured.sent["distilled"] for w in batch.items]
    assert [(r.tenant, r.request_id) for r in admitted] == [
        ("flood", "f0"),
        ("acme", "acme-1"),
        ("阿里", "阿里-1"),
        ("flood", "f1"),
        ("flood", "f2"),
    ]
    limited = captured.sent["rejected"]
    assert [(r.reason, r.request_id) for r in limited] == [("rate_limited", f"f{i}") for i in range(3, 10)]
    assert all(0 < r.retry_after_s <= 1.0 and "JEV_TENANT_RATES" in r.detail for r in limited)


async def test_postprocess_fills_cache_and_cache_then_hits(app_and_sent):
    app, captured = app_and_sent
    scored = Decision(request_id="r1", tier="fine", action_id="a", nominal_tokens=9, input_tokens=5)
    async with app.faust.agents["format_decision"].test_context() as agent:
        await agent.put(WorkBatch(items=[work(scored)]))
        await eventually(lambda: "usage" in captured.sent)  # the stage takes micro-batches: wait for its output
        assert Entry.loads(app.faust.tables["l1_cache"]["k1"]).value["action_id"] == "a"
        assert [d.action_id for d in captured.sent["decisions"]] == ["a"]
    async with app.faust.agents["lookup_cache"].test_context() as agent:
        await agent.put(WorkBatch(items=[work()]))
        await eventually(lambda: len(captured.sent["decisions"]) == 2)
    hit = captured.sent["decisions"][1]
    assert (hit.request_id, hit.tier, hit.action_id) == ("r1", "cache_l1", "a"), "a hit is answered by the cache agent"
    assert ("cache", "hit") in [(e.stage, e.outcome) for b in captured.sent["usage"] for e in b.events]
    assert captured.sent.get("score", []) == [] or all(not b.items for b in captured.sent["score"])


async def test_ingest_reserves_budget_and_rejects_over_a_hard_limit(app_and_sent):
    from schemas.records import Control

    app, captured = app_and_sent
    app.controls.apply(Control(kind="budget", key="tenant:acme", value={"hard_tokens": 25}))
    await app.ingest.hand_over(requests([orjson.dumps({**REQUEST, "request_id": f"r{i}"}) for i in range(3)]))
    admitted = [w.request.request_id for batch in captured.sent["distilled"] for w in batch.items]
    rejected = captured.sent["rejected"]
    assert admitted == ["r0", "r1"], "each ranked request reserves context + candidates + 3 output tokens: 11"
    assert [(r.reason, r.request_id) for r in rejected] == [("over_budget", "r2")]
    assert "tenant:acme" in rejected[0].detail
    assert set(app.budgets.open) == {"4:acme/2:r0", "4:acme/2:r1"}  # (tenant, request_id)
    assert [a.rule for a in captured.sent["alerts"]] == ["budget_hard"]


async def test_version_bump_serves_a_stale_entry_once_and_queues_one_refresh(app_and_sent):
    from schemas.records import Control

    app, captured = app_and_sent
    scored = Decision(request_id="r1", tier="fine", action_id="a", nominal_tokens=9)
    async with app.faust.agents["format_decision"].test_context() as agent:
        await agent.put(WorkBatch(items=[work(scored)]))
        await eventually(lambda: "usage" in captured.sent)
    app.controls.apply(Control(kind="version", key="prompt", value="2"))
    async with app.faust.agents["lookup_cache"].test_context() as agent:
        for _ in range(3):
            await agent.put(WorkBatch(items=[work()]))
        await eventually(lambda: sum(len(b.items) for b in captured.sent.get("score", [])) == 3)
    served = [d.chain[0] for d in captured.sent["decisions"][1:]]
    to_score = [w for b in captured.sent["score"] for w in b.items]
    assert served == ["cache_l1:stale"], "a stale entry is served exactly once"
    assert sorted(w.refresh for w in to_score) == [False, False, True], "one refresh, then plain misses"


async def test_semantic_hit_within_partition_only(app_and_sent):
    app, captured = app_and_sent
    scored = Decision(request_id="r1", tier="fine", action_id="a", nominal_tokens=9)
    original = work()
    async with app.faust.agents["lookup_cache"].test_context() as agent:
        await agent.put(WorkBatch(items=[original]))
        await eventually(lambda: "score" in captured.sent)
    async with app.faust.agents["format_decision"].test_context() as agent:
        original.decision = scored
        await agent.put(WorkBatch(items=[original]))
        await eventually(lambda: "usage" in captured.sent)
    rephrased = Request.from_data({**REQUEST, "request_id": "r2", "state": "trail shoes!"})
    other_tenant = Request.from_data({**REQUEST, "request_id": "r3", "tenant": "globex", "state": "trail shoes!"})
    async with app.faust.agents["lookup_cache"].test_context() as agent:
        for req in (rephrased, other_tenant):
            await agent.put(
                WorkBatch(
                    items=[
                        Work(
                            request=req,
                            admitted_at=0.0,
                            model="gpt-4o-mini",
                            context=req.state,
                            cache_key=req.request_id,
                        )
                    ]
                )
            )
        await eventually(lambda: len(captured.sent["score"]) == 2 and len(captured.sent["decisions"]) == 2)
    hits = {d.request_id: d.tier for d in captured.sent["decisions"][1:]}
    assert hits == {"r2": "cache_l2"}


async def test_a_work_with_a_deadline_goes_to_score_before_the_rest_of_its_batch_is_embedded(app_and_sent, monkeypatch):
    from streams.cache.stage import CacheStage

    app, captured = app_and_sent
    embedded = []  # per embedding: the outboxes delivered before it
    embed = CacheStage.embed
    monkeypatch.setattr(
        CacheStage, "embed", lambda self, works: embedded.append(len(captured.outboxes)) or embed(self, works)
    )
    checkout = Request.from_data(
        {
            **REQUEST,
            "request_id": "pay",
            "decision_type": "risk_interception",
            "state": {"risk_score": 0.5, "amount": 80},
            "deadline_ms": 300,
        }
    )
    works = [
        work(),
        Work(
            request=checkout,
            admitted_at=time.time(),
            model="gpt-4o-mini",
            context="State: pay",
            context_tokens=4,
            candidate_tokens=[2, 1],
            cache_key="k-pay",
        ),
    ]
    async with app.faust.agents["lookup_cache"].test_context() as agent:
        await agent.put(WorkBatch(items=works))
        await eventually(lambda: len(captured.sent.get("score", [])) == 2)
    first, then = captured.sent["score"]
    assert [w.request.request_id for w in first.items] == ["pay"] and embedded == [1]  # sent, then the embedding
    assert [w.request.request_id for w in then.items] == ["r1"]


async def test_l3_pre_answers_a_learned_follow_up_and_serves_it(app_and_sent):
    app, captured = app_and_sent

    def asking(rid, session, question):
        req = Request.from_data({**REQUEST, "request_id": rid, "session_id": session, "state": question})
        return Work(
            request=req, admitted_at=0.0, model="gpt-4o-mini", context=question, cache_key=rid, candidate_tokens=[2, 1]
        )

    first, follow_up = "which trail shoes grip wet rock", "are they waterproof for river crossings"
    async with app.faust.agents["lookup_cache"].test_context() as agent:
        for session in ("s1", "s2"):  # the pattern must be seen twice before it is worth tokens
            await agent.put(
                WorkBatch(items=[asking(f"{session}a", session, first), asking(f"{session}b", session, follow_up)])
            )
        assert not any(w.predictive for b in captured.sent.get("score", []) for w in b.items)
        await agent.put(WorkBatch(items=[asking("b1", "s3", first)]))
        await eventually(lambda: any(w.predictive for b in captured.sent.get("score", []) for w in b.items))
    predicted = [w for b in captured.sent["score"] for w in b.items if w.predictive]
    assert [(w.request.request_id, w.request.state, w.refresh) for w in predicted] == [("b1~l3~0", follow_up, True)]
    async with app.faust.agents["format_decision"].test_context() as agent:
        predicted[0].decision = Decision(request_id="b1~l3~0", tier="fine", action_id="b", nominal_tokens=5)
        await agent.put(WorkBatch(items=predicted))
        await eventually(lambda: "usage" in captured.sent)
    assert "decisions" not in captured.sent, "a pre-answer is cached, never sent to a caller"
    async with app.faust.agents["lookup_cache"].test_context() as agent:
        await agent.put(WorkBatch(items=[asking("c2", "s4", follow_up)]))
        await eventually(lambda: "decisions" in captured.sent)
    hits = [(d.request_id, d.tier, d.action_id) for d in captured.sent["decisions"]]
    assert hits == [("c2", "cache_l3", "b")]


async def test_ingest_answers_l1_hits_and_rule_matches_itself_only_where_this_worker_holds_the_partition(
    app_and_sent, monkeypatch
):
    from faust.types import TP

    app, captured = app_and_sent
    held: set = set()
    monkeypatch.setattr(app.faust.assignor, "assigned_actives", lambda: held)
    risky = {
        "request_id": "x1",
        "tenant": "acme",
        "service": "pay",
        "decision_type": "risk_interception",
        "state": {"risk_score": 0.99, "amount": 5000},
        "candidates": [{"id": "allow", "text": "allow"}, {"id": "block", "text": "block"}],
    }
    await app.ingest.hand_over(requests([orjson.dumps(REQUEST), orjson.dumps(risky)]))
    [miss, ruled] = [w for batch in captured.sent["distilled"] for w in batch.items]
    assert "decisions" not in captured.sent, "no partition held: both go on to the cache agent"
    scored = Decision(request_id="r1", tier="fine", action_id="a", nominal_tokens=9, input_tokens=5)
    async with app.faust.agents["format_decision"].test_context() as agent:
        await agent.put(WorkBatch(items=[miss.derive(decision=scored)]))
        await eventually(lambda: "decisions" in captured.sent)

    distilled = app.topics.distilled.get_topic_name()
    held.update(TP(distilled, p) for p in range(app.faust.conf.topic_partitions))
    await app.ingest.hand_over(
        requests([orjson.dumps({**REQUEST, "request_id": "r3"}), orjson.dumps({**risky, "request_id": "x2"})])
    )
    assert [w.request.request_id for b in captured.sent["distilled"] for w in b.items] == ["r1", "x1"]
    decided = {d.request_id: d for d in captured.sent["decisions"]}
    assert (decided["r3"].tier, decided["r3"].action_id) == ("cache_l1", "a")
    assert (decided["x2"].tier, decided["x2"].action_id, decided["x2"].chain) == (
        "rules",
        "block",
        ["rules:block-known-fraud"],
    )
    assert decided["x2"].nominal_tokens == ruled.context_tokens * 2 + sum(ruled.candidate_tokens)
    events = sorted(e.event_id for b in captured.sent["usage"] for e in b.events if e.request_id in ("r3", "x2"))
    assert events == [
        "4:acme/2:r3:cache:cache_l1",
        "4:acme/2:r3:ingest",
        "4:acme/2:r3:postprocess",
        "4:acme/2:x2:ingest",
        "4:acme/2:x2:postprocess",
        "4:acme/2:x2:score:rules",
    ], "the same usage as on the way through the cache agent and a scoring worker"


async def test_ingest_sends_a_checkout_it_cannot_answer_straight_to_score_where_it_holds_the_partition(
    app_and_sent, monkeypatch
):
    """A structured request with a deadline, not answered by L1 or the rules here: the cache agent could add nothing
    (no L2, no L3 for a state that is not words), so it skips that hop. Words, or a partition not held: the hop."""
    from faust.types import TP

    app, captured = app_and_sent
    distilled = app.topics.distilled.get_topic_name()
    held = {TP(distilled, p) for p in range(app.faust.conf.topic_partitions)}
    monkeypatch.setattr(app.faust.assignor, "assigned_actives", lambda: held)
    checkout = {
        "request_id": "pay",
        "tenant": "acme",
        "service": "pay",
        "decision_type": "risk_interception",
        "state": {"risk_score": 0.5, "amount": 80},
        "deadline_ms": 300,
        "candidates": [{"id": "allow", "text": "allow"}, {"id": "review", "text": "review"}],
    }
    worded = {**REQUEST, "request_id": "words", "deadline_ms": 300}
    await app.ingest.hand_over(
        requests(
            [
                orjson.dumps(checkout),
                orjson.dumps(worded),
                orjson.dumps({**checkout, "request_id": "plain", "deadline_ms": 0}),
            ]
        )
    )
    assert [w.request.request_id for b in captured.sent["score"] for w in b.items] == ["pay"]
    assert [w.request.request_id for b in captured.sent["distilled"] for w in b.items] == ["words", "plain"]
    held.clear()  # another worker holds the partitions: their cache agent answers, so the hop stays
    await app.ingest.hand_over(requests([orjson.dumps({**checkout, "request_id": "pay2"})]))
    assert [w.request.request_id for b in captured.sent["distilled"] for w in b.items][-1] == "pay2"
    assert [w.request.request_id for b in captured.sent["score"] for w in b.items] == ["pay"]


async def test_the_cache_agent_answers_a_rule_match_with_the_same_step_as_ingest(app_and_sent, monkeypatch):
    app, captured = app_and_sent
    monkeypatch.setattr(app.faust.assignor, "assigned_actives", lambda: set())  # ingest answers nothing itself
    risky = {
        "request_id": "x1",
        "tenant": "acme",
        "service": "pay",
        "decision_type": "risk_interception",
        "state": {"risk_score": 0.99, "amount": 5000},
        "candidates": [{"id": "allow", "text": "allow"}, {"id": "block", "text": "block"}],
    }
    await app.ingest.hand_over(requests([orjson.dumps(risky)]))
    [ruled] = [w for batch in captured.sent["distilled"] for w in batch.items]
    async with app.faust.agents["lookup_cache"].test_context() as agent:
        await agent.put(WorkBatch(items=[ruled]))
        await eventually(lambda: "decisions" in captured.sent)
    [decision] = captured.sent["decisions"]
    assert (decision.tier, decision.action_id, decision.chain) == ("rules", "block", ["rules:block-known-fraud"])
    assert not any(b.items for b in captured.sent.get("score", [])), "a rule match never reaches a scoring worker"
    events = sorted(e.event_id for b in captured.sent["usage"] for e in b.events)
    assert events == ["4:acme/2:x1:ingest", "4:acme/2:x1:postprocess", "4:acme/2:x1:score:rules"]


async def test_ingest_distills_keys_the_work_and_drops_the_history_it_folded_into_the_context(app_and_sent):
    from schemas.records import Turn

    app, captured = app_and_sent
    req = Request.from_data({**REQUEST, "history": [{"role": "user", "content": "I run on muddy mountain trails"}]})
    await app.ingest.hand_over(requests([orjson.dumps(req.to_representation())]))
    [out] = [w for batch in captured.sent["distilled"] for w in batch.items]
    assert out.cache_key and out.request.history == [] and "muddy mountain trails" in out.context
    assert req.history == [Turn(role="user", content="I run on muddy mountain trails")]


async def test_a_defect_on_one_request_dead_letters_it_and_the_batch_goes_on(app_and_sent, monkeypatch):
    from streams.ingest import stage as ingest_stage

    app, captured = app_and_sent
    real_admit = ingest_stage.admit

    def admit(raw, *args, **kwargs):
        if b'"boom"' in raw:
            raise KeyError("a bug")
        return real_admit(raw, *args, **kwargs)

    monkeypatch.setattr(ingest_stage, "admit", admit)
    await app.ingest.hand_over(requests([orjson.dumps({**REQUEST, "request_id": "boom"}), orjson.dumps(REQUEST)]))
    [rejection] = captured.sent["rejected"]
    assert rejection.reason == "internal_error" and "KeyError" in rejection.detail
    assert '"boom"' in rejection.original
    assert [w.request.request_id for b in captured.sent["distilled"] for w in b.items] == ["r1"]


def test_a_distill_defect_passes_the_request_on_with_ingests_context(monkeypatch):
    from streams.distill import work as distill_mod

    work = Work(
        request=Request.from_data({**REQUEST, "history": [{"role": "user", "content": "hi"}]}),
        admitted_at=0.0,
        model="gpt-4o-mini",
        context="user: hi\n\nState: trail shoes",
        context_tokens=9,
    )
    monkeypatch.setattr(distill_mod, "distill_work", lambda *a: 1 / 0)
    [out], events = distill_mod.Distiller("")([work], {}, 0.0)
    assert out.context == "user: hi\n\nState: trail shoes" and out.cache_key and events == []


class RecordingSink:
    def __init__(self):
        self.inserts: list[list] = []

    def insert(self, events: list) -> int:
        self.inserts.append(events)
        return len(events)

    def take_set_aside(self) -> list:
        return []


async def test_usage_sink_inserts_each_envelope_in_chunks_and_dead_letters_a_malformed_one(settings):
    from streams.usage.events import usage_event

    sink, captured = RecordingSink(), Captured()
    app = create_app(
        settings.replace(broker="kafka://127.0.0.1:9", sink_batch_max=2), {"ranking"}, sink=sink, sender=captured
    )
    req = Request.from_data(REQUEST)
    good = UsageBatch(events=[usage_event(req, stage) for stage in ("ingest", "distill", "postprocess")]).dumps()
    await app.usage.hand_over(consumed(name("usage"), [good, b'{"events": "x"}', None]))
    assert [[e.event_id for e in chunk] for chunk in sink.inserts] == [
        ["4:acme/2:r1:ingest", "4:acme/2:r1:distill"],
        ["4:acme/2:r1:postprocess"],
    ]
    assert [(r.reason, r.stage) for r in captured.sent["rejected"]] == [("bad_internal_message", name("usage"))] * 2
    assert captured.sent["rejected"][0].detail.startswith(f"{name('usage')}[0]@1: ")


async def test_a_sampled_request_sends_its_naive_twin_and_postprocess_pairs_them_into_a_verdict(settings):
    from schemas.records import Verdict

    captured = Captured()
    app = create_app(
        settings.replace(
            broker="kafka://127.0.0.1:9", stage_batch_wait_ms=1, cache_embedder="hashing", shadow_rate="1"
        ),
        {"ranking"},
        sink=object(),
        sender=captured,
    )
    await app.ingest.hand_over(requests([orjson.dumps(REQUEST)]))
    [served] = [w for batch in captured.sent["distilled"] for w in batch.items]
    [naive] = [w for batch in captured.sent["shadow"] for w in batch.items]
    assert (served.shadow, naive.shadow) == ("served", "naive")
    assert naive.cache_key == served.cache_key, "both halves meet on the served work's cache-key partition"
    async with app.faust.agents["format_decision"].test_context() as agent:
        await agent.put(
            WorkBatch(
                items=[
                    naive.derive(decision=Decision(request_id="r1", tier="fine", action_id="b", input_tokens=9)),
                    served.derive(
                        decision=Decision(
                            request_id="r1", tier="coarse", action_id="a", input_tokens=5, nominal_tokens=9
                        )
                    ),
                ]
            )
        )
        await eventually(lambda: "verdicts" in captured.sent)
    [(key, value)] = captured.sent["verdicts"]
    verdict = Verdict.loads(value)
    assert key == b"r1" and (verdict.request_id, verdict.agreed, verdict.kept) == ("r1", False, False)
    assert (verdict.served_action, verdict.naive_action) == ("a", "b")
    assert [d.request_id for d in captured.sent["decisions"]] == ["r1"], "only the served decision reaches the caller"


async def test_a_near_miss_is_judged_as_shadow_work_and_promoted_into_the_cache(settings):
    """L2 certifies nothing here (no verdicts), so a near-miss is answered as usual; its naive twin goes out as
    shadow work under its own request id, and once its naive answer agrees with the cached one, the question is
    served from L2 through the promoted key."""
    from streams.core.metrics import PROMOTED_HITS, PROMOTIONS

    captured = Captured()
    app = create_app(
        settings.replace(
            broker="kafka://127.0.0.1:9", stage_batch_wait_ms=1, cache_embedder="hashing", budget_leases=0
        ),
        {"ranking"},
        sink=object(),
        sender=captured,
    )
    asked = "trail running shoes for rocky ground"
    near = "trail running shoes for the rocky ground"

    def ask(request_id: str, state: str, decision=None) -> Work:
        return Work(
            request=Request.from_data({**REQUEST, "request_id": request_id, "state": state}),
            admitted_at=0.0,
            model="gpt-4o-mini",
            context=f"State: {state}",
            context_tokens=4,
            candidate_tokens=[2, 1],
            cache_key=f"k-{request_id}",
            decision=decision,
        )

    async def lookup(work: Work) -> None:
        before = sum(len(b.items) for b in captured.sent.get("score", [])) + len(captured.sent.get("decisions", []))
        async with app.faust.agents["lookup_cache"].test_context() as agent:
            await agent.put(WorkBatch(items=[work]))
            await eventually(
                lambda: (
                    sum(len(b.items) for b in captured.sent.get("score", [])) + len(captured.sent.get("decisions", []))
                    > before
                )
            )

    async def postprocess(work: Work) -> None:
        async with app.faust.agents["format_decision"].test_context() as agent:
            await agent.put(WorkBatch(items=[work]))
            await asyncio.sleep(0.2)

    promoted_before = PROMOTIONS.labels("promoted")._value.get()
    await lookup(ask("r1", asked))  # a miss: scored, then its answer fills L1 and L2
    await postprocess(ask("r1", asked, Decision(request_id="r1", tier="fine", action_id="a", input_tokens=5)))
    await lookup(ask("r2", near))
    assert [w.request.request_id for b in captured.sent["score"] for w in b.items] == ["r1", "r2"], "r2 missed"
    [twin] = [w for batch in captured.sent["shadow"] for w in batch.items]
    assert (twin.shadow, twin.request.request_id, twin.cache_key) == ("promote", "r2~promote", "k-r2")
    assert twin.cache_match["question"] == asked and twin.cache_match["near_miss"]
    await postprocess(twin.derive(decision=Decision(request_id="r2~promote", tier="fine", action_id="a")))
    assert PROMOTIONS.labels("promoted")._value.get() == promoted_before + 1
    assert [d.request_id for d in captured.sent["decisions"]] == ["r1"], "a judging twin never reaches a caller"

    hits_before = PROMOTED_HITS._value.get()
    await lookup(ask("r3", near))
    hit = captured.sent["decisions"][-1]
    assert (hit.request_id, hit.tier, hit.action_id) == ("r3", "cache_l2", "a")
    assert PROMOTED_HITS._value.get() == hits_before + 1
