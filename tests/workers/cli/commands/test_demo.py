"""`jev demo`'s choice of generator: the local model server when it is installed (else the extractive generator,
saying why and how to install it), --model-url with the concurrency the server takes, and the settings the served
demo writes (the server's model behind the generator, and behind the escalation tier with --escalate; one slot,
answers cut short)."""

from importlib import resources

import orjson
import pytest
import yaml

from streams.output import chunks as stream_mod
from workers.cli.main import main
from workers.harness import demo as demo_mod


@pytest.fixture
def ran(monkeypatch, tmp_path):
    """The settings each demo run got (the pipeline itself is not started here)."""
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path / "jev"))
    seen = []

    async def run_demo(settings, n, *args):
        seen.append(settings)
        return {"requests": n, "decided": n, "generator": settings.generator}

    monkeypatch.setattr(demo_mod, "run_demo", run_demo)
    return seen


def test_without_the_model_server_the_demo_says_why_and_answers_extractively(ran, monkeypatch, capsys):
    monkeypatch.setattr("infra.model_server.missing", lambda: "llama-server is not installed: make model-server")
    assert main(["demo", "--requests", "3", "--json"]) == 0
    out = capsys.readouterr()
    assert "extractive generator" in out.err and "make model-server" in out.err
    assert ran[0].generator == "extractive" and orjson.loads(out.out)["generator"] == "extractive"


def test_local_model_is_an_error_when_the_server_is_not_installed(ran, monkeypatch, capsys):
    monkeypatch.setattr("infra.model_server.missing", lambda: "llama-server is not installed: make model-server")
    assert main(["demo", "--local-model", "--json"]) == 2
    assert "make model-server" in capsys.readouterr().err and not ran


def test_no_model_server_and_a_bad_concurrency(ran, capsys):
    assert main(["demo", "--no-model-server", "--requests", "2", "--json"]) == 0
    assert ran[0].generator == "extractive"
    assert main(["demo", "--model-url", "http://127.0.0.1:9/v1", "--model-concurrency", "0"]) == 2
    assert "--model-concurrency" in capsys.readouterr().err


def test_served_settings_put_the_servers_model_behind_generate_and_escalation_only_when_asked(monkeypatch, settings):
    class Listed:
        def json(self):
            return {"data": [{"id": "smollm2-135m-instruct"}]}

    monkeypatch.setattr("httpx.get", lambda url, timeout: Listed())
    served = demo_mod.served_settings(settings, "http://127.0.0.1:8000/v1", concurrency=2)
    entry = yaml.safe_load(open(served.models))["models"]["smollm2-135m-instruct"]
    assert entry["base_url"] == "http://127.0.0.1:8000/v1" and entry["options"]["max_concurrency"] == 2
    bundled = yaml.safe_load(resources.files("streams.scoring").joinpath("decision_types.yaml").read_text())
    types = yaml.safe_load(open(served.decision_types))
    assert types["tiers"]["escalation"] == bundled["tiers"]["escalation"] != "smollm2-135m-instruct"
    assert types["defaults"] == bundled["defaults"]
    lengths = stream_mod.load(served.stream_config).lengths
    assert max(lengths.values()) == demo_mod.SERVED_ANSWER_TOKENS and served.generator == "smollm2-135m-instruct"
    escalating = yaml.safe_load(
        open(demo_mod.served_settings(settings, "http://127.0.0.1:8000/v1", escalate=True).decision_types)
    )
    assert escalating["tiers"]["escalation"] == "smollm2-135m-instruct"
    assert escalating["defaults"]["timeout_ms"] == demo_mod.SERVED_TIMEOUT_MS
