import orjson
import pytest

from schemas.records import Candidate as Option
from schemas.records import Decision, Request, Work
from streams.cache.exact import cache_key
from streams.cache.stage import CacheStage
from streams.core.switches import SWITCHES
from streams.runtime.agents.cache import CacheStateLog

ALL_ON = dict.fromkeys(SWITCHES, True)
QUESTIONS = [
    "How do I reset my password?",
    "Where is my invoice?",
    "How do I cancel my plan?",
    "What does the premium plan cost?",
    "How do I export my data?",
]
ASKED = [
    "how do I reset my password",
    "where is my invoice",
    "how do i cancel my plan",
    "what does the premium plan cost",
    "how do I export my data",
    "Is there a student discount?",
]


def faq_work(request_id: str, question: str, session: str = "") -> Work:
    request = Request(
        request_id=request_id,
        tenant="acme",
        service="help",
        decision_type="faq",
        state=question,
        session_id=session,
        candidates=[Option(id="a", text="settings"), Option(id="b", text="support")],
    )
    work = Work(request=request, admitted_at=0.0, model="gpt-4o-mini")
    work.cache_key = cache_key(work)
    return work


def new_stage(tmp_path) -> CacheStage:
    from streams import settings as settings_mod

    return CacheStage(
        {}, settings_mod.load().replace(data_dir=str(tmp_path), cache_embedder="hashing", cache_semantic_threshold=0.5)
    )


def ask(stage: CacheStage, question: str, n: int = 0):
    work = faq_work(f"q{n}", question)
    hit = stage.lookup_semantic(work, stage.embed([work])[0])
    return work, hit


def filled(tmp_path) -> CacheStage:
    """A stage holding five answers, with enough verdicts learned that its partition serves L2 hits, and the
    follow-up statistics of two sessions."""
    stage = new_stage(tmp_path)
    for i, question in enumerate(QUESTIONS):
        work, _ = ask(stage, question, i)
        stage.fill(work, Decision(request_id=work.request.request_id, tier="fine", action_id=f"a{i}"), ALL_ON)
    n = 100
    while ask(stage, ASKED[0])[1] is None:
        work, _ = ask(stage, ASKED[0], n)
        stage.fill(work, Decision(request_id=work.request.request_id, tier="fine", action_id="a0"), ALL_ON)
        n += 1
    for session in ("s1", "s2"):
        stage.prefetches(faq_work(f"{session}a", QUESTIONS[0], session), ALL_ON)
        stage.prefetches(faq_work(f"{session}b", QUESTIONS[1], session), ALL_ON)
    return stage


def served(stage: CacheStage) -> list:
    return [(hit.matched, hit.value["action_id"]) if hit else None for hit in (ask(stage, q)[1] for q in ASKED)]


def test_a_restarted_stage_rebuilt_from_the_changelog_serves_the_same_hits(tmp_path):
    before = filled(tmp_path)
    records = before.take_changes()
    assert {r["op"] for r in records} == {"fill", "verdict", "observe"}
    hits = served(before)
    assert sum(h is not None for h in hits) >= 4, "the filled stage serves L2 hits"

    empty = new_stage(tmp_path)
    assert all(h is None for h in served(empty)), "a stage started empty serves nothing"

    after = new_stage(tmp_path)
    after.restore(orjson.loads(orjson.dumps(records)))  # through JSON, as on the topic
    assert served(after) == hits
    partition = next(iter(before.learner.partitions))
    assert after.learner.threshold(partition) == before.learner.threshold(partition)
    assert after.semantic.evidence.stats() == before.semantic.evidence.stats(), "the pooled verdicts, the verifier"
    assert after.followups.of("acme").likely_next(QUESTIONS[0]) == before.followups.of("acme").likely_next(
        QUESTIONS[0]
    ), "each tenant's follow-up model is rebuilt as its own"
    assert after.followups.of("acme").likely_next(QUESTIONS[0]) and not after.followups.of("globex").likely_next(
        QUESTIONS[0]
    )


def test_a_fill_without_a_vector_is_re_embedded_at_restore(tmp_path):
    stage = new_stage(tmp_path)
    predicted = faq_work("p1~l3~0", QUESTIONS[2])
    predicted.predictive = True
    stage.fill(predicted, Decision(request_id="p1~l3~0", tier="fine", action_id="b"), ALL_ON)
    [record] = stage.take_changes()
    assert record["op"] == "fill" and record["vector"] is None
    after = new_stage(tmp_path)
    after.restore([record])
    assert ask(after, QUESTIONS[2])[1].value["action_id"] == "b", "an L3 pre-answer served to its own question"


def test_state_log_messages_skip_their_own_origin_and_apply_another_process(tmp_path):
    writer_stage = filled(tmp_path)
    writer = CacheStateLog("127.0.0.1:9", writer_stage)
    messages = writer.messages()
    assert messages and writer_stage.take_changes() == []
    for message in messages:
        writer.apply(message)
    assert writer.applied == 0, "a process does not apply its own records twice"
    reader = CacheStateLog("127.0.0.1:9", new_stage(tmp_path))
    for message in messages:
        reader.apply(message)
    assert reader.applied == sum(len(orjson.loads(m)["records"]) for m in messages)
    assert served(reader.stage) == served(writer_stage)


def test_unknown_record_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown cache-state record op 'drop'"):
        new_stage(tmp_path).restore([{"op": "drop"}])


async def test_a_new_process_rebuilds_the_cache_from_the_topic_on_the_real_broker(tmp_path, broker):
    """The killed process's records are on the cache-state topic; a new process reads it from its beginning
    and serves the same hits."""
    import asyncio

    from schemas.topics import name
    from tests.conftest import fresh_topic

    writer_stage = filled(tmp_path)
    messages = CacheStateLog("unused", writer_stage).messages()
    expected = sum(len(orjson.loads(m)["records"]) for m in messages)
    bootstrap = await fresh_topic(broker, name("cache_state"), 1, messages)
    reader = CacheStateLog(bootstrap, new_stage(tmp_path), poll_ms=50)
    following = asyncio.ensure_future(reader.follow())
    try:
        for _ in range(200):
            if reader.applied >= expected:
                break
            await asyncio.sleep(0.05)
    finally:
        reader.stopping.set()
        await following
    assert reader.applied == expected
    assert served(reader.stage) == served(writer_stage)
