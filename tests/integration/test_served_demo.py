"""`jev demo --model-url` against the real model server (the `model_server` fixture: llama.cpp's llama-server
serving SmolLM2-135M-Instruct on the CPU, one request at a time), as a user runs it: every request decided and
none falling back as model_unavailable while the server is up (calls queue for its one slot), the
streamed answers from the served model, both token counts per model and their agreement."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.model_server]
ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 24


def test_the_served_demo_decides_every_request_with_no_fallbacks(model_server, tmp_path):
    env = {
        **os.environ,
        "JEV_DATA_DIR": str(tmp_path / "jev"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "workers.cli.main",
            "demo",
            "--model-url",
            model_server.url,
            "--requests",
            str(REQUESTS),
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["decided"] == report["requests"] == REQUESTS
    # no call failed and the circuit never opened: calls queued for the server's one slot. A decision still falls
    # back for its own time (its caller's deadline, its type's budget) when the queue is longer than that time
    assert report["fallbacks"]["model_unavailable"] == 0, report["fallbacks"]
    assert report["generator"] == model_server.model and report["tiers"].get("llm", 0) > 0
    served = report["by_model"][model_server.model]
    assert served["calls"] > 0 and served["tokens_jev"] > 0 and served["cost"] >= 0
    # llama-server counts every call, streamed answers included (stream_options.include_usage), so every served
    # call is reconciled; Jev counts each prompt before the call in the model's own GGUF vocabulary with its chat
    # template, and meters the output the server generated as the server counted it: the two counts are equal
    assert served["tokens_jev"] == served["tokens_server"] > 0 and served["drift"] == 0, served
    stream = report["stream"]
    assert stream["generated"] > 0 and stream["ordered"] and report["tokens"]["actual"] > 0
    # the usage rows say what each client got, beside the output tokens the streams generated
    assert stream["usage_delivered_equal_chunks"] and stream["generated_tokens"] > 0, stream
