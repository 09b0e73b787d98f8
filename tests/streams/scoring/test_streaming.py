"""The scoring engine's stream path with the real extractive generator and a fake clock: chunks in order, the
length per question type, the bucket's pacing and its live switch, one usage row whose output tokens are the
sum of the chunks, and the decision's totals."""
import time

import pytest

from schemas.records import Request, Work
from streams import metrics, tokens
from streams.backends.extractive import ExtractiveGenerator
from streams.output import stream as stream_config
from streams.output.clean import clean
from streams.backends import registry
from streams.scoring.engine import Engine
from streams.scoring.streaming import Clock

MODEL = "gpt-4o-mini"
REFERENCE = "\n".join(f"Parcels to warehouse {i % 9} leave within {i} hours and arrive in {i % 4 + 2} days."
                      for i in range(90))


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
    eng = Engine(coarse=registry.scorer("lexical"), fine=registry.scorer("lexical"), generator=ExtractiveGenerator(MODEL),
                 stream_config=stream_config.load(), clock=clock or FakeClock(), chunk_sink=sent.append)
    return eng, sent


def work(question: str, **fields) -> Work:
    state = f"{question}\nReference:\n{REFERENCE}"
    request = Request.from_data({"request_id": "s1", "tenant": "acme", "service": "support",
                                 "decision_type": "customer_service", "kind": "generate", "stream": True,
                                 "state": state, "contracts": {"max_output_tokens": 512}, **fields})
    context = f"State: {state}"
    return Work(request=request, admitted_at=1_000_100.0 - 0.25, model=MODEL, context=context,
                context_tokens=tokens.count(context, MODEL))


@pytest.mark.parametrize("question, fields, length, chunk", [
    ("When does my parcel arrive?", {}, 128, 64),
    ("Write a poem for a late parcel.", {}, 512, 64),
    ("When does my parcel arrive?", {"client": "mobile"}, 128, 32),
    ("Anything", {"question_type": "creative", "client": "mobile"}, 512, 32),
])
def test_a_stream_goes_out_in_order_within_its_length_and_meters_the_sum_of_its_chunks(question, fields, length,
                                                                                       chunk):
    eng, sent = engine()
    decision, events = eng.decide(work(question, **fields))
    assert [c.seq for c in sent] == list(range(len(sent))) and sent[-1].final and not any(c.final for c in sent[:-1])
    assert all(c.tokens <= chunk for c in sent) and len(sent) >= length // chunk
    total = sum(c.tokens for c in sent)
    assert length - 2 <= total <= length
    assert decision.text == "".join(c.text for c in sent)
    assert decision.tier == "llm" and stream_config.streamed(decision)
    [row] = events  # one usage row for the whole stream, not one per chunk
    assert row.event_id == "4:acme/2:s1:score:stream" and row.output_tokens == total == decision.output_tokens
    assert row.first_chunk_ms == pytest.approx(250.0) and row.tokens_per_s > 0


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
    w.context = "Sure! I can help with that. It leaves today. <think>the depot. closes.</think>It arrives Friday. " \
                "I hope this helps! Let me know if you have questions."
    decision, _ = eng.decide(w)
    generated = ExtractiveGenerator(MODEL).generate(w.context, 128).text
    assert decision.text == clean(generated, model=MODEL).text
    assert decision.text == "I can help with that. It leaves today. It arrives Friday."
    assert metrics.STREAM_CHUNKS.labels("web")._value.get() == before + len(sent)


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
    assert row.output_tokens == tokens.count(streamed_text, MODEL) + tokens.count(
        decision.text[len(streamed_text):], MODEL)
    w.decision = decision
    assert finalize(w, now=1_000_101.0).review  # the caller never gets it
