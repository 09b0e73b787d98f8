"""Streamed answers, the pure parts: the plan per question type and client, cleanup while streaming, the cut
into ordered chunks, and the token bucket's pacing."""

import pytest

from schemas.records import Decision, Request
from streams.output import chunks as S
from streams.output.clean import clean
from streams.text import tokens

MODEL = "gpt-4o-mini"
LONG = " ".join(f"Line {i} says the parcel leaves warehouse {i % 7} within {i} hours." for i in range(120))


def request(state="How long does delivery take?", **fields) -> Request:
    return Request.from_data(
        {
            "request_id": "q1",
            "tenant": "acme",
            "service": "support",
            "decision_type": "customer_service",
            "kind": "generate",
            "stream": True,
            "state": state,
            "contracts": {"max_output_tokens": 1024},
            **fields,
        }
    )


@pytest.mark.parametrize(
    "fields, qtype, length",
    [
        ({}, "factual", 128),
        ({"question_type": "fact"}, "factual", 128),
        ({"question_type": "creative"}, "creative", 512),
        ({"state": "Write a poem about late parcels\nReference:\nparcels"}, "creative", 512),
        ({"state": "When does it ship?\nReference:\nthe story of a poem"}, "factual", 128),  # only the question line
        ({"state": {"question": "Compose a slogan for the sale", "article": "..."}}, "creative", 512),
    ],
)
def test_the_output_length_follows_the_declared_type_or_the_rules(fields, qtype, length):
    plan = S.load().plan(request(**fields))
    assert (plan.question_type, plan.length) == (qtype, length)


@pytest.mark.parametrize("client, chunk, rate", [("", 64, 512), ("web", 64, 512), ("mobile", 32, 256)])
def test_chunk_size_and_pace_follow_the_client(client, chunk, rate):
    plan = S.load().plan(request(client=client))
    assert (plan.client, plan.chunk_tokens, plan.tokens_per_s) == (client or "web", chunk, rate)


def test_the_contract_stays_a_ceiling_and_reservations_cover_the_plan():
    req = request(question_type="creative", contracts={"max_output_tokens": 300})
    assert S.load().plan(req).length == 300
    assert S.reserved_output(req) == 300
    assert S.reserved_output(request()) == 128
    assert S.reserved_output(request(stream=False)) == 1024


@pytest.mark.parametrize(
    "fields, message",
    [({"question_type": "poetry"}, "question_type 'poetry'"), ({"client": "watch"}, "client 'watch'")],
)
def test_unknown_types_and_clients_name_the_configured_ones(fields, message):
    with pytest.raises(ValueError, match=message):
        S.load().plan(request(**fields))


def test_a_bad_config_names_the_field(tmp_path):
    bad = tmp_path / "stream.yaml"
    bad.write_text(
        "default_type: factual\ntypes:\n  factual: {max_output_tokens: -5}\n"
        "clients: {web: {chunk_tokens: 64, tokens_per_s: 512}}\ndefault_client: web\n"
    )
    with pytest.raises(ValueError, match="types.factual.max_output_tokens must be a positive integer"):
        S.load(str(bad))


@pytest.mark.parametrize("piece", [1, 5, 13, 200])
@pytest.mark.parametrize("length, chunk", [(128, 64), (512, 32), (100, 16)])
def test_chunks_are_ordered_sized_and_sum_to_the_answer(piece, length, chunk):
    chunker = S.Chunker("q1", length=length, chunk_tokens=chunk, model=MODEL)
    chunks = []
    for i in range(0, len(LONG), piece):
        chunks += chunker.feed(LONG[i : i + piece])
    chunks += chunker.finish()
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert [c.final for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert all(c.tokens <= chunk for c in chunks)
    assert all(c.tokens == tokens.count(c.text, MODEL) for c in chunks)
    running = 0
    for c in chunks:
        running += c.tokens
        assert c.tokens_so_far == running
    assert running <= length and running >= length - 2  # the long text is cut at the length
    progress = [c.progress for c in chunks]
    assert progress == sorted(progress) and progress[-1] == 100
    text = "".join(c.text for c in chunks)
    assert LONG.startswith(text) and "%" not in text  # progress is a field, never in the text


def test_a_short_answer_ends_with_its_last_chunk_final():
    chunks = S.chunk_text("q1", "Ships in two days.", S.load().plan(request()), MODEL)
    assert [(c.seq, c.text, c.final, c.progress) for c in chunks] == [(0, "Ships in two days.", True, 100)]
    [empty] = S.chunk_text("q1", "", S.load().plan(request()), MODEL)
    assert (empty.text, empty.tokens, empty.final) == ("", 0, True)


def test_the_bucket_releases_the_first_chunk_at_once_then_paces_at_the_rate():
    pacer, now, waits = S.Pacer(256, 32, now=0.0), 0.0, []
    for _ in range(16):  # 512 tokens in chunks of 32 for a mobile client
        wait = pacer.wait(32, now)
        waits.append(wait)
        now += wait
    assert waits[0] == 0.0
    assert waits[1:] == pytest.approx([32 / 256] * 15)
    assert now == pytest.approx((512 - 32) / 256)


def test_the_bucket_refills_while_generation_is_slower_than_the_rate():
    pacer = S.Pacer(512, 64, now=0.0)
    assert pacer.wait(64, 0.0) == 0.0
    assert pacer.wait(64, 1.0) == 0.0  # a second later the bucket is full again


def test_pacing_off_never_waits():
    pacer = S.Pacer(256, 32, now=0.0)
    assert [pacer.wait(32, 0.0, enabled=False) for _ in range(10)] == [0.0] * 10


MESSY = (
    "Sure! Here is the answer:\nThe parcel ships today. [DEBUG] kept: not at a line start\n[DEBUG] x=1\n"
    "It arrives in two days. I hope this helps! More text <think>internal. notes.</think>follows here.\n\n"
    "```python\nprint('I hope this helps!')\n[DEBUG] inside code\n```\nDone. Let me know if you need anything!"
)


@pytest.mark.parametrize("piece", [1, 3, 7, 50, len(MESSY)])
def test_streaming_cleanup_gives_what_clean_gives_on_the_whole_text(piece):
    cleaner = S.StreamCleaner(MODEL)
    out = "".join(cleaner.feed(MESSY[i : i + piece]) for i in range(0, len(MESSY), piece)) + cleaner.finish()
    assert out == clean(MESSY, model=MODEL).text
    assert "I hope this helps! More" in out and "[DEBUG] inside code" in out and "Let me know" not in out


MESSY_ZH = (
    "好的！作为一个AI助手，很高兴为您解答。\n\n您的订单已于3月5日发货，预计两天内送达。退货需在七天内申请。\n\n"
    "希望对您有所帮助，记得保留快递单号！如有任何疑问，请随时告诉我。"
)


@pytest.mark.parametrize("piece", [1, 4, 11, len(MESSY_ZH)])
def test_streaming_cleanup_of_chinese_gives_what_clean_gives(piece):
    cleaner = S.StreamCleaner(MODEL)
    out = "".join(cleaner.feed(MESSY_ZH[i : i + piece]) for i in range(0, len(MESSY_ZH), piece)) + cleaner.finish()
    assert out == clean(MESSY_ZH, model=MODEL).text
    assert out == "您的订单已于3月5日发货，预计两天内送达。退货需在七天内申请。\n\n记得保留快递单号！"


@pytest.mark.parametrize(
    "text",
    [
        "你好，今天过得怎么样？",
        "Hello, how are you today?",
        "你好！很高兴为您解答。巴黎是法国的首都。它位于塞纳河畔。",
        "Hello! Paris is the capital of France. It lies on the Seine. It is old.",
    ],
)
@pytest.mark.parametrize("piece", [1, 5, 200])
def test_a_greeting_is_kept_or_dropped_in_a_stream_as_clean_does(text, piece):
    cleaner = S.StreamCleaner(MODEL)
    out = "".join(cleaner.feed(text[i : i + piece]) for i in range(0, len(text), piece)) + cleaner.finish()
    assert out == clean(text, model=MODEL).text
    assert ("你好" in out or "Hello" in out) == ("今天" in text or "today" in text)


def test_cleanup_off_streams_the_raw_text():
    cleaner = S.StreamCleaner(MODEL, enabled=False)
    assert "".join(cleaner.feed(MESSY[i : i + 9]) for i in range(0, len(MESSY), 9)) + cleaner.finish() == MESSY


def test_only_a_generated_stream_counts_as_streamed():
    assert S.streamed(Decision(request_id="q", tier="llm", chain=["generate:x:llm", "stream:web:factual:2"]))
    assert not S.streamed(Decision(request_id="q", tier="cache_l1", chain=["stream:web:factual:2"]))
    assert not S.streamed(Decision(request_id="q", tier="llm", chain=["generate:x:llm"]))


def test_postprocess_keeps_a_streamed_text_as_its_chunks_and_still_scans_it():
    from schemas.records import Work
    from streams.postprocess.finalize import finalize

    text = "Sure! Here is the answer:\nParis.\nI hope this helps!"  # as if cleanup had been switched off
    streamed_decision = Decision(request_id="q1", tier="llm", text=text, chain=["generate:x:llm", "stream:web:f:1"])
    done = finalize(Work(request=request(), admitted_at=1.0, model=MODEL, decision=streamed_decision), now=2.0)
    assert done.decision.text == text and not done.review  # what the caller already read as chunks
    flagged = Decision(
        request_id="q1", tier="llm", text="the key: -----BEGIN RSA PRIVATE KEY-----", chain=["stream:web:f:1"]
    )
    assert finalize(Work(request=request(), admitted_at=1.0, model=MODEL, decision=flagged), now=2.0).review


def test_an_existing_answer_is_streamed_whole_whatever_its_length():
    chunks = S.chunk_text("q1", LONG, S.load().plan(request(client="mobile")), MODEL, now=5.0)
    assert "".join(c.text for c in chunks) == LONG
    assert [c.seq for c in chunks] == list(range(len(chunks))) and chunks[-1].final and chunks[-1].progress == 100
    assert all(c.tokens <= 32 and c.ts == 5.0 for c in chunks)
