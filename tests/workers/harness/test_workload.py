import orjson

from schemas.records import Request
from schemas.validate import decode
from streams.cache.semantic import partition_of
from streams.core.switches import SWITCHES
from streams.distill.work import Distiller
from streams.ingest.decode import Admission, admit
from streams.output.chunks import question_text
from streams.text import language, tokens
from workers.harness import workload


def test_workload_is_deterministic_valid_and_has_repeats():
    a, b = workload.generate(200, seed=5), workload.generate(200, seed=5)
    assert [orjson.loads(x)["state"] for x in a] == [orjson.loads(x)["state"] for x in b]
    requests = [decode(raw, Request, 1_048_576) for raw in a]
    assert len({r.request_id for r in requests}) == 200
    types = {r.decision_type for r in requests}
    assert types == {"inventory_transfer", "risk_interception", "ranking"}
    bodies = [orjson.dumps([r.decision_type, r.state, [c.text for c in r.candidates]]) for r in requests]
    assert len(set(bodies)) < 170, "a share of the workload must repeat earlier requests"


def test_a_stream_share_adds_streamed_support_questions_and_leaves_the_default_mix_alone():
    def bodies(payloads):
        return [{k: v for k, v in orjson.loads(p).items() if k != "created_at"} for p in payloads]

    assert bodies(workload.generate(50, seed=5)) == bodies(workload.generate(50, seed=5, stream_share=0.0))
    requests = [decode(raw, Request, 1_048_576) for raw in workload.generate(200, seed=5, stream_share=0.1)]
    streamed = [r for r in requests if r.stream]
    assert 10 <= len(streamed) <= 40
    assert all(r.kind == "generate" and r.decision_type == "customer_service" and not r.candidates for r in streamed)
    assert {r.client for r in streamed} == {"web", "mobile"}
    assert {r.question_type for r in streamed} == {"", "fact", "creative"}


def test_a_deadline_share_puts_the_checkout_deadline_on_payment_screenings_only():
    requests = [decode(raw, Request, 1_048_576) for raw in workload.generate(300, seed=5, deadline_share=0.3)]
    timed = [r for r in requests if r.deadline_ms]
    screenings = [r for r in requests if r.decision_type == "risk_interception"]
    assert {r.decision_type for r in timed} == {"risk_interception"}
    assert {r.deadline_ms for r in timed} == {workload.CHECKOUT_DEADLINE_MS}
    assert 0.15 * len(screenings) <= len(timed) <= 0.5 * len(screenings)
    plain = [orjson.loads(p) for p in workload.generate(300, seed=5)]
    assert not any(body.get("deadline_ms") for body in plain)
    rest = lambda body: {k: v for k, v in body.items() if k not in ("deadline_ms", "created_at")}  # noqa: E731
    assert [rest(orjson.loads(p)) for p in workload.generate(300, seed=5, deadline_share=0.3)] == list(map(rest, plain))


def test_reworded_product_searches_keep_their_candidates_and_leave_the_rest_of_the_workload_as_it_was():
    def without_time(payloads):
        return [{k: v for k, v in orjson.loads(p).items() if k != "created_at"} for p in payloads]

    plain, reworded = without_time(workload.generate(400)), without_time(workload.generate(400, reword_share=1.0))
    changed = [(a, b) for a, b in zip(plain, reworded) if a != b]
    assert changed and all(a["decision_type"] == "ranking" for a, _ in changed)
    assert all(
        a["candidates"] == b["candidates"] and {k for k in a if a[k] != b[k]} <= {"state", "history"}
        for a, b in changed
    )
    assert all(b["state"].startswith("Shopper query: ") for _, b in changed)
    assert len({b["state"] for _, b in changed}) > 0.8 * len(changed), "most wordings are new to L1"


def test_reworded_searches_share_the_l2_partition_of_their_intent_in_english_and_in_chinese():
    """Every wording of one search, in either language, is asked over the same SKU ids, so L2 can match it
    against the earlier wordings of that intent in its language (the partition holds the language)."""
    requests = [decode(raw, Request, 1_048_576) for raw in workload.generate(800, reword_share=1.0, chinese_share=0.3)]
    searches = [r for r in requests if r.decision_type == "ranking"]
    chinese = [r for r in searches if language.detect(r.state) == "zh"]
    english = [r for r in searches if language.detect(r.state) == "en"]
    assert len(chinese) + len(english) == len(searches) and 0.15 * len(searches) < len(chinese) < 0.5 * len(searches)
    assert all(
        r.state.startswith("顾客搜索：") and all(language.detect(c.text) == "zh" for c in r.candidates) for r in chinese
    )
    assert len({r.state for r in chinese}) > 0.8 * len(chinese), "most Chinese wordings are new to L1"
    by_ids = lambda r: frozenset(c.id for c in r.candidates)  # noqa: E731
    assert {by_ids(r) for r in chinese} == {by_ids(r) for r in english}, "the same items in both languages"
    for lang, group in (("zh", chinese), ("latin", english)):
        partitions = {partition_of(r) for r in group}
        assert {p[3] for p in partitions} == {lang}
        assert len(partitions) == len(workload.QUERIES), "one partition per search intent"
    sku = {c.id: c.text for r in english for c in r.candidates}
    assert all(sku[c.id] != c.text for r in chinese for c in r.candidates)


def test_chinese_rewordings_leave_the_rest_of_the_workload_as_it_was():
    def without_time(payloads):
        return [{k: v for k, v in orjson.loads(p).items() if k != "created_at"} for p in payloads]

    english = without_time(workload.generate(400, reword_share=1.0, chinese_share=0.2))
    plain = without_time(workload.generate(400, chinese_share=0.2))
    assert [a for a in english if a["decision_type"] != "ranking"] == [
        a for a in plain if a["decision_type"] != "ranking"
    ]


def test_a_chinese_share_replaces_new_decisions_with_chinese_tickets_and_keeps_the_rest():
    requests = [decode(raw, Request, 1_048_576) for raw in workload.generate(300, seed=5, chinese_share=0.1)]
    chinese = [r for r in requests if r.service == "support-zh"]
    assert 10 <= len(chinese) <= 60
    assert all(
        language.detect(r.state) == "zh"
        and r.decision_type == "customer_service"
        and {c.id for c in r.candidates} == {a for a, _ in workload.ZH_ACTIONS}
        for r in chinese
    )
    plain = [decode(raw, Request, 1_048_576) for raw in workload.generate(300, seed=5)]
    assert [r.state for r in requests if r.service != "support-zh"] == [
        p.state for r, p in zip(requests, plain) if r.service != "support-zh"
    ]


def test_a_chinese_share_asks_streamed_questions_in_chinese_too():
    requests = [
        decode(raw, Request, 1_048_576) for raw in workload.generate(600, seed=5, stream_share=0.2, chinese_share=0.3)
    ]
    streamed = [r for r in requests if r.stream]
    chinese = [r for r in streamed if language.detect(r.state) == "zh"]
    assert 0 < len(chinese) < len(streamed)
    assert all(
        r.kind == "generate"
        and r.service == "support-zh"
        and [(t.role, t.content) for t in r.history] == [("system", workload.POLICY_ZH)]
        for r in chinese
    )


def test_support_questions_share_the_store_policy_ahead_of_the_question_through_ingest_and_distill():
    """Every English support question is answered from the same policy, every Chinese one from the Chinese policy,
    and the context the generator gets (ingest, then distill) holds it first, untouched, and the question last:
    consecutive prompts share all of the policy's tokens (a model server reuses that prefix)."""
    admission = Admission(
        1_048_576, "gpt-4o-mini", frozenset({"customer_service", "ranking", "risk_interception", "inventory_transfer"})
    )
    payloads = [
        p for p in workload.generate(600, seed=5, stream_share=0.2, chinese_share=0.2) if orjson.loads(p).get("stream")
    ]
    works, _ = Distiller("")([admit(p, admission) for p in payloads], dict.fromkeys(SWITCHES, True), 0.0)
    for policy, service in ((workload.POLICY, "support"), (workload.POLICY_ZH, "support-zh")):
        mine = [w for w in works if w.request.service == service]
        assert len(mine) >= 5 and len({w.request.state for w in mine}) > 3, service
        shared = f"system: {policy}\n\nState: "
        assert all(w.context == shared + w.request.state for w in mine), service
        assert all(not w.dropped_turns for w in mine)
        assert tokens.count(shared, "gpt-4o-mini") > 5 * max(tokens.count(w.request.state, "gpt-4o-mini") for w in mine)
    english = next(w for w in works if w.request.service == "support")
    assert question_text(english.request) == english.request.state  # the stream's length follows the question


def test_request_ids_are_the_ids_each_payload_carries():
    payloads = workload.generate(40, seed=3)
    assert workload.request_ids(payloads) == {orjson.loads(p)["request_id"] for p in payloads}
    assert len(workload.request_ids(payloads + payloads[:5])) == len(set(payloads))
