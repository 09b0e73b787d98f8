"""One streamed generate answer through a real model server, metered: shared by the tests of each server (llama.cpp's
in test_served_model.py, vLLM's in test_vllm_server.py), which differ only in the generator and how exactly each
server's prompt count matches Jev's."""

import time

from schemas.records import Request, UsageEvent, Work
from streams.models.lexical import LexicalBackend
from streams.output import chunks as stream_config
from streams.scoring.engine import Engine

QUESTIONS = {
    "en": "My parcel arrived broken. What should I do? Answer in one sentence.",
    "zh": "我的包裹到的时候坏了，我该怎么办？请用一句话回答。",
}


def streamed_answer(generator, lang: str, max_output_tokens: int) -> UsageEvent:
    """Stream QUESTIONS[lang]'s answer from `generator`; check what the client read (chunks in order, the last one
    final, the delivered tokens theirs) and that the output is the server's count; return the stream's usage row
    for the caller's check of the prompt's two counts."""
    sent = []
    eng = Engine(
        coarse=LexicalBackend(),
        fine=LexicalBackend(),
        generator=generator,
        stream_config=stream_config.load(),
        chunk_sink=sent.append,
    )
    request = Request.from_data(
        {
            "request_id": f"s-{lang}",
            "tenant": "acme",
            "service": "support",
            "decision_type": "customer_service",
            "kind": "generate",
            "stream": True,
            "state": QUESTIONS[lang],
            "contracts": {"max_output_tokens": max_output_tokens},
        }
    )
    work = Work(
        request=request, admitted_at=time.time(), model="gpt-4o-mini", context=QUESTIONS[lang], context_tokens=20
    )
    decision, events = eng.decide(work)
    assert decision.tier == "llm" and decision.text.strip() and sent and sent[-1].final
    assert [c.seq for c in sent] == list(range(len(sent)))
    [row] = [e for e in events if e.stack.endswith("stream")]
    assert row.delivered_tokens == sum(c.tokens for c in sent)  # what the client read: the chunks' tokens
    # the output as the server counted it in the stream (the text re-tokenized reads short: cl100k_base 34 for 48
    # generated in Chinese, the GGUF vocabulary 47 of 48 on some answers)
    assert row.count_source == "server" and row.server_input_tokens > 0
    assert row.output_tokens == row.server_output_tokens == decision.output_tokens > 0
    return row
