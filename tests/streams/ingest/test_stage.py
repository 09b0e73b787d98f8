"""The ingest stage called on its own, as the runtime calls it: request messages in, an Outbox out; no Faust app, no
broker. Its collaborators are the real ones (distiller, budget book, idempotency state, tokenizer), but for the
local answers: this worker holds no cache-key partition, so every admitted request goes on as distilled work."""

import orjson
import pytest

from schemas.records import Control, Work
from schemas.topics import name
from streams.budgets.book import BudgetBook
from streams.budgets.snapshot import apply_budget_controls
from streams.core.outbox import Outbox
from streams.core.switches import Controls
from streams.distill.work import Distiller
from streams.idempotency.requests import LOG_TOPIC, Requests, log_key
from streams.ingest.decode import Admission
from streams.ingest.stage import Ingest
from streams.ingest.templates import Templates
from streams.text import tokens
from tests.conftest import Captured, consumed

ENGLISH = {
    "request_id": "en1",
    "tenant": "acme",
    "service": "search",
    "decision_type": "ranking",
    "state": "trail shoes for muddy mountain paths",
    "history": [{"role": "user", "content": "I run on muddy mountain trails"}],
    "candidates": [{"id": "a", "text": "trail running shoe"}, {"id": "b", "text": "office loafer"}],
}
CHINESE = {
    **ENGLISH,
    "request_id": "zh1",
    "tenant": "阿里",
    "state": "适合泥泞山路的越野跑鞋",
    "history": [{"role": "user", "content": "我经常在泥泞的山路上跑步"}],
    "candidates": [{"id": "a", "text": "越野跑鞋"}, {"id": "b", "text": "皮鞋"}],
}


class HoldsNoPartition:
    """The local answers of a worker that holds none of the cache-key partitions: it answers nothing itself."""

    def answer_owned(self, works: list[Work]) -> tuple[list[Work], Outbox]:
        return works, Outbox()


def ingest_stage(settings, book: BudgetBook | None = None, controls: Controls | None = None) -> tuple[Ingest, Captured]:
    admission = Admission(
        settings.max_record_bytes,
        settings.default_model,
        frozenset({"ranking", "risk_interception"}),
        Templates.from_dir(),
    )
    sender = Captured()
    stage = Ingest(
        settings,
        admission,
        book or BudgetBook(),
        controls or Controls(),
        lambda: None,  # no raw-text store (JEV_RAW_TEXT_DAYS off)
        Distiller(settings.distill_policies),
        HoldsNoPartition(),
        sender,
        Requests(settings.idempotency_max),
    )
    return stage, sender


def messages(*bodies) -> list:
    return consumed(name("requests"), [b if isinstance(b, bytes) else orjson.dumps(b) for b in bodies])


@pytest.mark.parametrize("body", [ENGLISH, CHINESE], ids=["english", "chinese"])
async def test_a_request_is_admitted_counted_distilled_and_sent_on_and_a_broken_one_dead_lettered(settings, body):
    stage, _ = ingest_stage(settings)
    out = await stage(messages(body, b"{broken"))
    [work] = out.work["distilled"]
    assert (work.request.tenant, work.request.request_id) == (body["tenant"], body["request_id"])
    assert work.candidate_tokens == [tokens.count(c["text"], work.model) for c in body["candidates"]]
    assert work.context_tokens == tokens.count(work.context, work.model) > 0
    assert body["history"][0]["content"] in work.context and work.request.history == []  # distilled: folded in
    assert work.cache_key
    assert [(r.reason, r.stage) for r in out.dead_letters] == [("bad_json", "ingest")]
    assert [(topic, key) for topic, key, _ in out.records] == [(LOG_TOPIC, log_key(body["tenant"], body["request_id"]))]
    assert [(e.stage, e.request_id, e.outcome) for e in out.usage if e.stage == "ingest"] == [
        ("ingest", body["request_id"], "admitted")
    ]
    again = await stage(messages(body))  # redelivered before its decision: no second admission, nothing sent
    assert not again


async def test_requests_with_a_deadline_go_out_first_through_the_sender_and_a_hard_budget_refuses(settings):
    book, controls = BudgetBook(), Controls()
    controls.listeners.append(apply_budget_controls(book))
    stage, sender = ingest_stage(settings, book, controls)
    checkout = {**CHINESE, "request_id": "pay1", "decision_type": "risk_interception", "state": {"risk_score": 0.5}}
    out = await stage(messages(ENGLISH, {**checkout, "deadline_ms": 300}))
    [urgent] = sender.outboxes
    assert [w.request.request_id for w in urgent.work["distilled"]] == ["pay1"]
    assert [w.request.request_id for w in out.work["distilled"]] == ["en1"]
    controls.apply(Control(kind="budget", key="tenant:阿里", value={"hard_tokens": 1}))
    refused = await stage(messages({**CHINESE, "request_id": "zh2"}))
    assert [(r.reason, r.request_id, r.tenant) for r in refused.dead_letters] == [("over_budget", "zh2", "阿里")]
    assert "tenant:阿里" in refused.dead_letters[0].detail and not refused.work
