"""vLLM backend: GPU only (gpu extra). Skips cleanly without a GPU or vllm."""

import importlib.util
import shutil

import pytest

from streams.models import vllm as vllm_backend

pytestmark = pytest.mark.gpu


def test_prompts_put_the_shared_context_first():
    prompts = vllm_backend.prompts("the context", ["a", "b"])
    prefix = "Context: the context\nCandidate: "
    assert all(p.startswith(prefix) for p in prompts) and prompts[0] != prompts[1]


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or shutil.which("nvidia-smi") is None,
    reason="needs an NVIDIA GPU and the gpu extra (vllm)",
)
def test_vllm_scores_with_prefix_cache_reads(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[3] / "bench" / "gpu"))
    from vllm_prefix import export_smollm2

    backend = vllm_backend.VLLMBackend(export_smollm2(tmp_path / "smollm2"), gpu_memory_utilization=0.3)
    first = backend.score("A man is playing a guitar.", ["A person plays music.", "Stocks fell."])
    second = backend.score("A man is playing a guitar.", ["A cat sleeps.", "It rains."])
    assert len(first.scores) == 2 and first.output_tokens == 2
    assert 0 <= second.cache_read_tokens < second.input_tokens
    assert second.cache_read_tokens > 0


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or shutil.which("nvidia-smi") is None,
    reason="needs an NVIDIA GPU and the gpu extra (vllm)",
)
def test_a_micro_batch_reaches_vllm_in_one_generate_call(tmp_path):
    import sys
    from pathlib import Path

    from schemas.records import Candidate, Request
    from streams.models import lexical as backends
    from streams.scoring import policy
    from streams.scoring.engine import Engine
    from streams.scoring.factory import work_for

    sys.path.insert(0, str(Path(__file__).parents[3] / "bench" / "gpu"))
    from vllm_prefix import export_smollm2

    backend = vllm_backend.VLLMBackend(export_smollm2(tmp_path / "smollm2"), gpu_memory_utilization=0.3)
    calls = []
    generate = backend.llm.generate
    backend.llm.generate = lambda prompts, *a, **k: calls.append(len(prompts)) or generate(prompts, *a, **k)
    engine = Engine(
        coarse=backends.LexicalBackend(),
        fine=backend,
        mode="fine-only",
        config=policy.Config(tiers={}, policies={"ranking": policy.Policy()}, default=policy.Policy()),
    )
    works = [
        work_for(
            Request(
                request_id=f"r{i}",
                tenant="t",
                service="s",
                decision_type="ranking",
                state=f"question {i} about a guitar",
                candidates=[Candidate(id=c, text=c) for c in ("music", "stocks", "rain")],
            ),
            "gpt-4o-mini",
        )
        for i in range(4)
    ]
    decisions = engine.decide_batch(works)
    assert calls == [12] and all(d.tier == "fine" for d, _ in decisions)


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or shutil.which("nvidia-smi") is None,
    reason="needs an NVIDIA GPU and the gpu extra (vllm)",
)
def test_vllm_streams_what_it_generates(tmp_path):
    import sys
    from pathlib import Path

    from streams.models import registry

    sys.path.insert(0, str(Path(__file__).parents[3] / "bench" / "gpu"))
    from vllm_prefix import export_smollm2

    gen = registry.generator(f"vllm:{export_smollm2(tmp_path / 'smollm2')}")
    pieces = list(gen.stream("Name three colours.", 16))
    assert len(pieces) > 1
    assert "".join(pieces).strip() == gen.generate("Name three colours.", 16).text
