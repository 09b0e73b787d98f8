"""The real model server (llama.cpp's llama-server serving SmolLM2-135M-Instruct on the CPU) through its
OpenAI-compatible API: chat with usage, streaming with usage, cached prompt tokens, completions with logprobs, and
stop / kill / restart on the same port."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from infra import model_server as ms

pytestmark = pytest.mark.model_server

PROMPTS = {"en": "Name one primary colour. Answer in one word.", "zh": "用一个词说出一种原色。"}


def chat(server, content: str, max_tokens: int = 12, **extra) -> dict:
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }
    reply = httpx.post(f"{server.url}/chat/completions", json=body, timeout=120)
    reply.raise_for_status()
    return reply.json()


def tokenize(server, text: str) -> int:
    reply = httpx.post(f"{server.url.removesuffix('/v1')}/tokenize", json={"content": text}, timeout=30)
    reply.raise_for_status()
    return len(reply.json()["tokens"])


def test_gguf_comes_from_the_wheel():
    if ms.missing():
        pytest.skip(ms.missing())
    path = ms.gguf_path()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    assert path.open("rb").read(4) == b"GGUF"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_chat_completion_reports_usage(model_server, lang):
    out = chat(model_server, PROMPTS[lang])
    text = out["choices"][0]["message"]["content"]
    usage = out["usage"]
    assert text.strip(), out
    assert out["model"] == model_server.model
    assert 1 <= usage["completion_tokens"] <= 12
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # The prompt is the question inside the chat template: more tokens than the bare question, in the model's
    # own tokenizer.
    assert usage["prompt_tokens"] > tokenize(model_server, PROMPTS[lang])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_streamed_chat_gives_the_same_greedy_answer(model_server, lang):
    whole = chat(model_server, PROMPTS[lang])["choices"][0]["message"]["content"]
    body = {
        "model": model_server.model,
        "messages": [{"role": "user", "content": PROMPTS[lang]}],
        "max_tokens": 12,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    pieces, finishes, usages = [], [], []
    with httpx.stream("POST", f"{model_server.url}/chat/completions", json=body, timeout=120) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            if chunk.get("usage"):
                usages.append(chunk["usage"])
            for choice in chunk.get("choices", []):
                pieces.append(choice.get("delta", {}).get("content") or "")
                if choice.get("finish_reason"):
                    finishes.append(choice["finish_reason"])
    assert len([p for p in pieces if p]) > 1, "the answer came in one piece: not streamed"
    assert "".join(pieces) == whole
    assert finishes in (["stop"], ["length"])
    assert len(usages) == 1, "stream_options.include_usage: one usage chunk at the end"
    assert 1 <= usages[0]["completion_tokens"] <= 12
    assert usages[0]["prompt_tokens"] > tokenize(model_server, PROMPTS[lang])


def test_completions_return_logprobs_for_scoring(model_server):
    """A candidate label's log-probability as the next token: what a decision is scored with."""
    body = {
        "model": model_server.model,
        "prompt": "Q: What is the capital of France?\nA: The capital of France is",
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": 20,
    }
    reply = httpx.post(f"{model_server.url}/completions", json=body, timeout=120)
    reply.raise_for_status()
    out = reply.json()
    top = {t["token"]: t["logprob"] for t in out["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}
    assert len(top) == 20
    assert all(v <= 0 for v in top.values())
    assert 0.5 < sum(math.exp(v) for v in top.values()) <= 1.0001  # the 20 best hold most of the mass
    assert max(top, key=top.get).strip() == "Paris"
    assert out["usage"]["completion_tokens"] == 1


def test_kill_and_restart_on_the_same_port(model_server):
    url = model_server.url
    model_server.kill()
    assert not model_server.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", timeout=5)
    model_server.start()
    assert model_server.url == url
    assert httpx.get(f"{url}/models", timeout=5).json()["data"][0]["id"] == model_server.model
    model_server.restart()
    assert chat(model_server, PROMPTS["en"], max_tokens=4)["usage"]["completion_tokens"] >= 1


def test_a_server_that_cannot_start_says_why(tmp_path):
    if ms.missing():
        pytest.skip(ms.missing())
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a model")
    with pytest.raises(RuntimeError, match="exited with code"):
        ms.ModelServer(model_path=bad).start(timeout=60)


def test_the_server_gets_only_the_cores_left_idle(monkeypatch):
    monkeypatch.setattr(ms.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(ms.os, "getloadavg", lambda: (24.0, 20.0, 18.0))
    assert ms.idle_cores() == 1
    monkeypatch.setattr(ms.os, "getloadavg", lambda: (0.1, 0.2, 0.3))
    assert ms.idle_cores() == 2 and ms.idle_cores(most=1) == 1


def test_each_slot_gets_the_whole_context(tmp_path, monkeypatch):
    monkeypatch.setattr(ms, "server_binary", lambda: "/opt/llama-server")
    command = ms.ModelServer(model_path=tmp_path / "m.gguf", context=2048, slots=3).command()
    assert command[0] == "/opt/llama-server"
    assert command[command.index("--parallel") + 1] == "3"
    assert command[command.index("--ctx-size") + 1] == str(3 * 2048)


@pytest.mark.parametrize("service", ["support", "support-zh"])
def test_consecutive_support_questions_reuse_the_shared_policy_the_server_holds(service):
    """Two support questions of the demo workload, one after the other, as the generator sends them: the server
    reads the second one's policy (its shared prefix) from the first one's state and evaluates only the rest, and
    says so in its usage (prompt_tokens_details.cached_tokens)."""
    if ms.missing():
        pytest.skip(ms.missing())
    from schemas.records import Request
    from streams.text.prompt import render_context
    from workers.harness import workload

    bodies = [
        b
        for b in map(json.loads, workload.generate(200, seed=3, repeat_share=0.0, stream_share=1.0, chinese_share=0.5))
        if b["service"] == service
    ]
    prompts = [render_context(Request.from_data(b)) for b in bodies[:2]]
    assert prompts[0] != prompts[1]
    with ms.ModelServer(threads=1) as server:
        usages = [chat(server, prompt, max_tokens=1)["usage"] for prompt in prompts]
        policy = tokenize(server, f"system: {bodies[0]['history'][0]['content']}")
    cached = usages[1]["prompt_tokens_details"]["cached_tokens"]
    assert usages[0]["prompt_tokens_details"]["cached_tokens"] == 0, usages
    assert cached >= policy and usages[1]["prompt_tokens"] - cached < policy / 4, (usages, policy)


def test_a_missing_server_binary_names_the_install(monkeypatch):
    monkeypatch.setattr(ms.shutil, "which", lambda *a, **k: None)
    assert "make model-server" in ms.missing()
    with pytest.raises(FileNotFoundError, match="make model-server"):
        ms.ModelServer().command()


def test_a_missing_vllm_install_names_make_vllm(monkeypatch, tmp_path):
    monkeypatch.setattr(ms, "VLLM_VENV", tmp_path / ".venv-vllm")
    assert "make vllm" in ms.vllm_missing() and ms.missing_for("vllm") == ms.vllm_missing()
    with pytest.raises(FileNotFoundError, match="make vllm"):
        ms.VLLMServer().command()


def test_the_vllm_server_runs_its_openai_module_with_prefix_caching(monkeypatch, tmp_path):
    venv, model = tmp_path / ".venv-vllm", tmp_path / ".venv-vllm" / "smollm2"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setattr(ms, "VLLM_VENV", venv)
    monkeypatch.setattr(ms, "VLLM_MODEL_DIR", model)
    server = ms.server_for("vllm", port=8123, threads=1)
    command = server.command()
    assert command[:3] == [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"]
    for flag in ("--enable-prefix-caching", "--enable-prompt-tokens-details", "--enforce-eager"):
        assert flag in command
    assert command[command.index("--dtype") + 1] == "float32" and command[command.index("--model") + 1] == str(model)
    assert command[command.index("--served-model-name") + 1] == server.model == "smollm2-vllm"
    assert server.environment["VLLM_CPU_KVCACHE_SPACE"] == "2" and server.url == "http://127.0.0.1:8123/v1"
    assert type(ms.server_for("llama")) is ms.ModelServer
    with pytest.raises(ValueError, match="llama or vllm"):
        ms.server_for("sglang")
