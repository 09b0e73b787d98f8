"""The scoring engine's stream path with the real extractive generator and a fake clock: chunks in order, the
length per question type, the bucket's pacing and its live switch, one usage row whose output tokens are what the
generator generated (in its tokenizer; the server's usage settles) and whose delivered tokens are the chunks', and
the decision's totals, in English and Chinese."""

import re
import time

import pytest

from schemas.records import Request, Work
from streams.core import metrics
from streams.models import registry
from streams.models.extractive import ExtractiveGenerator
from streams.models.protocol import Streaming, Usage
from streams.output import chunks as stream_config
from streams.output.clean import clean
from streams.scoring.engine import Engine
from streams.scoring.streaming import Clock
from streams.text import tokens

MODEL = "gpt-4o-mini"  # o200k_base
GENERATOR_TOKENIZER = "gpt-4"  # cl100k_base
REFERENCE = "\n".join(
    f"Parcels to warehouse {i % 9} leave within {i} hours and arrive in {i % 4 + 2} days." for i in range(90)
)


class FakeClock(Clock):
    """Time moves only when the stream waits; every wait is kept."""

    def __init__(self):
        self.t, self.waits = 100.0, []
        super().__init__(now=lambda: self.t, wall=lambda: 1_000_000.0 + self.t, sleep=self.advance)

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        super().wait(seconds)


def engine(clock=None) -> tuple[Engine, list]:
    sent = []
    eng = Engine(
        coarse=registry.scorer("lexical"),
        fine=registry.scorer("lexical"),
        generator=ExtractiveGenerator(MODEL),
        stream_config=stream_config.load(),
        clock=clock or FakeClock(),
        chunk_sink=sent.append,
    )
    return eng, sent


def work(question: str, **fields) -> Work:
    state = f"{question}\nReference:\n{REFERENCE}"
    request = Request.from_data(
        {
            "request_id": "s1",
            "tenant": "acme",
            "service": "support",
            "decision_type": "customer_service",
            "kind": "generate",
            "stream": True,
            "state": state,
            "contracts": {"max_output_tokens": 512},
            **fields,
        }
    )
    context = f"State: {state}"
    return Work(
        request=request,
        admitted_at=1_000_100.0 - 0.25,
        model=MODEL,
        context=context,
        context_tokens=tokens.count(context, MODEL),
    )


@pytest.mark.parametrize(
    "question, fields, length, chunk",
    [
        ("When does my parcel arrive?", {}, 128, 64),
        ("Write a poem for a late parcel.", {}, 512, 64),
        ("When does my parcel arrive?", {"client": "mobile"}, 128, 32),
        ("Anything", {"question_type": "creative", "client": "mobile"}, 512, 32),
    ],
)
def test_a_stream_goes_out_in_order_within_its_length_and_meters_what_was_generated_and_delivered(
    question, fields, length, chunk
):
    eng, sent = engine()
    w = work(question, **fields)
    decision, events = eng.decide(w)
    assert [c.seq for c in sent] == list(range(len(sent))) and sent[-1].final and not any(c.final for c in sent[:-1])
    assert all(c.tokens <= chunk for c in sent) and len(sent) >= length // chunk
    total = sum(c.tokens for c in sent)
    assert length - 2 <= total <= length
    assert decision.text == "".join(c.text for c in sent)
    assert decision.tier == "llm" and stream_config.streamed(decision)
    [row] = events  # one usage row for the whole stream, not one per chunk
    generated = ExtractiveGenerator(MODEL).generate(w.context, length).output_tokens  # asked for the stream's length
    assert row.event_id == "4:acme/2:s1:score:stream" and row.delivered_tokens == total
    assert row.output_tokens == generated == decision.output_tokens and generated >= total
    assert row.first_chunk_ms == pytest.approx(250.0) and row.tokens_per_s > 0


class OtherTokenizer:
    """A generator counted in another tokenizer than the request's (a served model's): the real extractive answer,
    streamed in pieces, with the engine's count of its output in cl100k_base and a server's usage. `counted`: whether
    the engine keeps a count (else the stream path counts the text it read)."""

    name = model = "served-elsewhere"
    label = "llm"
    remote = True

    def __init__(self, counted: bool = True, completion_tokens: int = 0):
        self.counted, self.completion_tokens = counted, completion_tokens

    def stream(self, prompt: str, max_tokens: int) -> Streaming:
        text = ExtractiveGenerator(MODEL).generate(prompt, max_tokens).text
        prompt_tokens = tokens.count(prompt, GENERATOR_TOKENIZER)
        usage = Usage(prompt_tokens, self.completion_tokens) if self.completion_tokens else None
        return Streaming(
            iter([text[i : i + 7] for i in range(0, len(text), 7)]),
            prompt_tokens,
            self.model,
            self.label,
            usage,
            tokens.count(text, GENERATOR_TOKENIZER) if self.counted else None,
        )


CLEANED = {
    "en": "Sure! I can help with that. Parcels to depot 3 leave within 4 hours and arrive in 2 days. The Lyon hub "
    "closes at 22:00 on weekdays. I hope this helps! Let me know if you have questions.",
    "zh": "当然可以！发往3号仓库的包裹在4小时内出发，两天内到达。里昂中转站工作日22点关门。希望这对您有帮助！",
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_stream_is_metered_as_its_generator_counts_what_it_generated_not_as_the_chunks_count(lang):
    eng, sent = engine()
    eng.generator = OtherTokenizer(completion_tokens=50)
    w = work("When does my parcel arrive?")
    w.context = CLEANED[lang]
    decision, [row] = eng.decide(w)
    raw = ExtractiveGenerator(MODEL).generate(w.context, 128).text
    assert tokens.count(raw, GENERATOR_TOKENIZER) != tokens.count(raw, MODEL)  # the two tokenizers differ on it
    assert row.output_tokens == tokens.count(raw, GENERATOR_TOKENIZER)  # Jev's count, in the generator's tokenizer
    assert row.server_output_tokens == 50 == decision.output_tokens and row.count_source == "server"  # the bill
    assert row.delivered_tokens == sum(c.tokens for c in sent) == tokens.count(decision.text, MODEL)
    assert row.delivered_tokens < tokens.count(raw, MODEL)  # the preamble and the closer were cleaned away
    assert "Sure" not in decision.text and "当然" not in decision.text and "希望" not in decision.text


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_engine_without_its_own_count_is_counted_on_the_text_it_sent_in_its_models_tokenizer(lang, monkeypatch):
    eng, _ = engine()
    eng.generator = OtherTokenizer(counted=False)
    w = work("When does my parcel arrive?")
    w.context = CLEANED[lang]
    monkeypatch.setitem(tokens.MODEL_ENCODINGS, "served-elsewhere", "cl100k_base")  # a pool entry's `tokenizer:`
    tokens.encoding_name.cache_clear()
    try:
        _, [row] = eng.decide(w)
    finally:
        monkeypatch.undo()
        tokens.encoding_name.cache_clear()
    read = "".join(OtherTokenizer().stream(w.context, 128))
    assert row.output_tokens == tokens.count(read, GENERATOR_TOKENIZER) != tokens.count(read, MODEL)
    assert row.count_source == "missing" and row.server_output_tokens == row.output_tokens  # no usage: Jev's count


def test_the_bucket_paces_each_response_at_its_clients_rate():
    clock = FakeClock()
    eng, sent = engine(clock)
    eng.decide(work("Anything", question_type="creative", client="mobile"))
    assert clock.waits[0] == 0.0  # the first chunk at once
    paced = sum(clock.waits)
    assert paced == pytest.approx((sum(c.tokens for c in sent) - sent[0].tokens) / 256, rel=0.02)
    assert [c.ts for c in sent] == sorted(c.ts for c in sent)


def test_the_throttle_switch_turns_pacing_off_live():
    clock = FakeClock()
    eng, sent = engine(clock)

    def switch_off_after_the_third(chunk):
        sent.append(chunk)
        if chunk.seq == 2:
            eng.switches["postprocess.throttle"] = False  # what a control record does, mid-stream

    eng.chunk_sink = switch_off_after_the_third
    eng.decide(work("Anything", question_type="creative", client="mobile"))
    assert len(sent) > 5
    assert all(w > 0 for w in clock.waits[1:3]) and all(w == 0 for w in clock.waits[3:])


def test_a_stream_is_cleaned_as_it_goes_and_counted_in_prometheus():
    eng, sent = engine()
    before = metrics.STREAM_CHUNKS.labels("web")._value.get()
    w = work("When does my parcel arrive?")
    w.context = (
        "Sure! I can help with that. It leaves today. <think>the depot. closes.</think>It arrives Friday. "
        "I hope this helps! Let me know if you have questions."
    )
    decision, _ = eng.decide(w)
    generated = ExtractiveGenerator(MODEL).generate(w.context, 128).text
    assert decision.text == clean(generated, model=MODEL).text
    assert decision.text == "I can help with that. It leaves today. It arrives Friday."
    assert metrics.STREAM_CHUNKS.labels("web")._value.get() == before + len(sent)
    [row] = _  # what cleanup removed was generated: metered, never delivered
    assert (
        row.output_tokens == tokens.count(generated, MODEL) > row.delivered_tokens == tokens.count(decision.text, MODEL)
    )


def test_a_real_clock_really_waits():
    eng, sent = engine(Clock())
    started = time.monotonic()
    eng.decide(work("When does my parcel arrive?", client="mobile"))  # 128 tokens in chunks of 32 at 256/s
    assert time.monotonic() - started >= (sum(c.tokens for c in sent) - sent[0].tokens) / 256 * 0.95


def test_a_sensitive_sentence_is_never_streamed_and_the_answer_goes_to_review():
    from streams.postprocess.finalize import finalize

    eng, sent = engine()
    w = work("When does my parcel arrive?")
    w.context = "It leaves today. It arrives Friday. The route is strictly confidential. More follows here."
    decision, [row] = eng.decide(w)
    streamed_text = "".join(c.text for c in sent)
    assert "confidential" not in streamed_text and sent[-1].final
    assert decision.text.startswith(streamed_text) and "strictly confidential" in decision.text
    assert row.delivered_tokens == sum(c.tokens for c in sent) == tokens.count(streamed_text, MODEL)
    assert row.output_tokens == ExtractiveGenerator(MODEL).generate(w.context, 128).output_tokens  # all generated
    w.decision = decision
    assert finalize(w, now=1_000_101.0).review  # the caller never gets it


REFERENCE_ZH = "\n".join(f"发往{i % 9}号仓库的包裹在{i}小时内出发，{i % 4 + 2}天内到达。" for i in range(90))


class Counting:
    """The real extractive answer, streamed a few characters at a time, noting how many pieces were generated
    (pulled) and whether the stream was closed (what makes a model server stop); no count of its own, so the
    stream path counts the text it read."""

    name = model = MODEL
    label = "llm"

    def __init__(self):
        self.pulled, self.closed, self.total = 0, False, 0

    def stream(self, prompt: str, max_tokens: int) -> Streaming:
        text = ExtractiveGenerator(MODEL).generate(prompt, max_tokens).text
        pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
        self.total = len(pieces)

        def generate():
            try:
                for piece in pieces:
                    self.pulled += 1
                    yield piece
            finally:
                self.closed = True

        self.streaming = Streaming(generate(), tokens.count(prompt, MODEL), MODEL, self.label)
        return self.streaming


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_cancelled_stream_stops_generating_and_is_metered_for_what_it_generated(lang):
    from streams.core import cancels
    from streams.postprocess.finalize import finalize

    eng, sent = engine()
    eng.generator = generator = Counting()
    w = work("Anything", question_type="creative", client="mobile")
    if lang == "zh":
        w.context = f"State: 我的包裹什么时候到？\n参考：\n{REFERENCE_ZH}"

    def hang_up_after_the_second(chunk):
        sent.append(chunk)
        if chunk.seq == 1:  # what the scoring worker's control listener does when the gateway's caller went away
            eng.cancels.on_control(cancels.record("ACME", "s1"))  # the tenant in any spelling of it

    eng.chunk_sink = hang_up_after_the_second
    decision, [row] = eng.decide(w)
    assert [c.seq for c in sent] == [0, 1] and not any(c.final for c in sent)
    assert generator.closed and generator.pulled < generator.total  # the generation stopped
    assert generator.streaming.abandoned  # cut at once: a model server's closing usage is not waited for
    read = ExtractiveGenerator(MODEL).generate(w.context, 512).text[: generator.pulled * 5]
    assert row.outcome == "cancelled" and "stream:cancelled" in decision.chain and decision.error
    assert row.output_tokens == decision.output_tokens == tokens.count(read, MODEL) >= row.delivered_tokens
    assert row.delivered_tokens == sum(c.tokens for c in sent) == tokens.count(decision.text, MODEL) > 0
    assert 0 < row.output_tokens < 512
    w.decision = decision
    assert not finalize(w, now=1_000_101.0).cacheable  # an answer cut short never goes into a cache
    if lang == "zh":
        assert re.search(r"[\u4e00-\u9fff]", decision.text)


def test_a_cancel_stops_only_its_own_tenants_request_and_the_set_stays_bounded():
    from streams.core import cancels

    eng, sent = engine()
    eng.cancels = cancels.Cancels(keep=3)
    eng.cancels.on_control(cancels.record("globex", "s1"))  # another tenant's request of the same id
    decision, [row] = eng.decide(work("Anything", question_type="creative", client="mobile"))
    assert row.outcome == "ok" and sent[-1].final and not decision.error
    for i in range(5):
        eng.cancels.on_control(cancels.record("acme", f"r{i}"))
    assert len(eng.cancels.named) == 3
    assert not eng.cancels.cancelled("acme", "r1") and eng.cancels.cancelled("acme", "r4")
    assert not eng.cancels.cancelled("globex", "r4")
    with pytest.raises(ValueError, match="request id"):
        eng.cancels.on_control(cancels.record("acme", "").derive(value=None))
