"""`jev gateway keys` (a new key on the last line, only its hash stored, revoked by key or id, seen by a running
store without a restart) and the gateway's translation of the pipeline's refusals into OpenAI-shaped errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.runtime.client import JevRejected
from workers.processes import gateway

ROOT = Path(__file__).resolve().parents[4]


def jev(*args: str, data_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "JEV_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "workers.cli.main", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_keys_add_prints_the_key_last_and_stores_only_its_hash(tmp_path):
    added = jev("gateway", "keys", "add", "--tenant", "Acme", data_dir=tmp_path)
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip().splitlines()[-1]
    assert key.startswith("jev-") and len(key) > 40
    stored = (tmp_path / "gateway_keys.json").read_text()
    assert key not in stored and gateway.Keys.digest(key) in stored and '"acme"' in stored  # the tenant's one spelling
    assert oct((tmp_path / "gateway_keys.json").stat().st_mode)[-3:] == "600"
    listed = jev("gateway", "keys", "list", data_dir=tmp_path)
    key_id = gateway.Keys.digest(key)[:12]
    assert key_id in listed.stdout and "acme" in listed.stdout and key not in listed.stdout
    assert jev("gateway", "keys", "revoke", key_id, data_dir=tmp_path).returncode == 0
    assert gateway.Keys(tmp_path / "gateway_keys.json").tenant(key) is None
    refused = jev("gateway", "keys", "add", "--tenant", "a b", data_dir=tmp_path)
    assert refused.returncode == 2 and "tenant" in refused.stderr


def test_gateway_help_teaches_with_an_example_curl(tmp_path):
    shown = jev("gateway", "--help", data_dir=tmp_path).stdout
    assert "curl -N" in shown and "/v1/chat/completions" in shown and "keys add --tenant" in shown


def test_a_running_store_sees_keys_added_and_revoked(tmp_path):
    reader, writer = gateway.Keys(tmp_path / "k.json"), gateway.Keys(tmp_path / "k.json")
    _, first = writer.add("acme")
    assert reader.tenant(first) == "acme"
    time.sleep(0.01)  # a new modification time for the next write on coarse-clock filesystems
    _, second = writer.add("环球")
    assert reader.tenant(second) == "环球" and reader.tenant("jev-guessed") is None
    writer.revoke(first)
    assert reader.tenant(first) is None and reader.tenant(second) == "环球"


@pytest.mark.parametrize(
    ("reason", "detail", "status", "code", "param"),
    [
        ("wrong_type", "history[1].content: expected a string", 400, "wrong_type", "messages"),
        ("unknown_decision_type", "decision_type 'x' is not configured; known: ranking", 400, "unknown_decision_type",
         "decision_type"),
        ("over_contract", "context is 9000 tokens; contracts.max_input_tokens is 8000", 400, "context_length_exceeded",
         None),
        ("unknown_model", "unknown model 'gpt-9'", 404, "model_not_found", "model"),
        ("unknown_tenant", "tenant '环球' is not admitted: add it to JEV_TENANTS", 403, "unknown_tenant", "tenant"),
    ],
)  # fmt: skip
def test_rejections_map_to_statuses_codes_and_the_body_parameter(reason, detail, status, code, param):
    error = gateway.rejected(JevRejected(reason, detail, "r1"), gateway.CHAT_PARAMS)
    assert (error.status, error.code, error.param) == (status, code, param)
    assert error.body()["error"]["message"].endswith(detail) and error.body()["error"]["type"]


def test_budget_and_rate_refusals_are_429_with_retry_after():
    rate = gateway.rejected(JevRejected("rate_limited", "tenant acme over 1 requests/s", "r", 2.4), {})
    assert rate.status == 429 and rate.headers["Retry-After"] == "2" and rate.code == "rate_limit_exceeded"
    day = gateway.rejected(JevRejected("over_budget", "budget tenant:acme@day hard_tokens 10: used 9", "r"), {})
    month = gateway.rejected(JevRejected("over_budget", "budget tenant:acme@month hard_tokens 10: used 9", "r"), {})
    assert day.status == month.status == 429 and day.code == "insufficient_quota"
    assert 1 <= int(day.headers["Retry-After"]) <= 86400  # until the next UTC midnight
    assert int(month.headers["Retry-After"]) >= int(day.headers["Retry-After"])  # a month ends on a midnight or later
