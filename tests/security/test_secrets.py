"""Secrets stay out of every output (`jev config` as text and JSON, command errors such as `jev lag`'s), and the
metrics endpoint binds loopback unless told otherwise and answers only its token when one is set."""

from __future__ import annotations

import os
import socket
import stat
import time
import urllib.error
import urllib.request

import orjson
import psutil
import pytest

from streams import settings as settings_mod
from streams.core.metrics import bearer_token, start_metrics_server
from streams.security import logsafe
from workers.analytics.scrape import fetch
from workers.cli.main import main

PASSWORD, TOKEN = "hunter2-pw-0451", "metrics-token-9f8e7d6c"
ENV = {
    "JEV_CLICKHOUSE_DSN": f"http://analyst:{PASSWORD}@127.0.0.1:8123/jev",
    "JEV_BROKER": f"kafka://jev:{PASSWORD}@127.0.0.1:1",
    "JEV_METRICS_TOKEN": TOKEN,
}


@pytest.fixture
def secret_env(monkeypatch):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("as_json", [False, True])
def test_config_masks_passwords_and_tokens(secret_env, capsys, as_json):
    assert main(["config", "--json"] if as_json else ["config"]) == 0
    out = capsys.readouterr().out
    assert PASSWORD not in out and TOKEN not in out
    if as_json:
        shown = {variable: value for section in orjson.loads(out).values() for variable, value in section.items()}
        assert shown["JEV_CLICKHOUSE_DSN"] == "http://analyst:***@127.0.0.1:8123/jev"
        assert shown["JEV_METRICS_TOKEN"] == "***" and shown["JEV_BROKER"] == "kafka://jev:***@127.0.0.1:1"


def test_a_commands_error_output_carries_no_password(secret_env, capsys):
    assert main(["lag"]) == 2
    err = capsys.readouterr().err
    assert "no broker answered" in err and PASSWORD not in err and "jev:***@127.0.0.1" in err


@pytest.mark.parametrize(
    "text, kept",
    [
        (f"bootstrap jev:{PASSWORD}@kafka-1:9092 refused", "jev:***@kafka-1:9092"),
        ("see tcp://127.0.0.1:9092 and a@b.example", "tcp://127.0.0.1:9092 and a@b.example"),
    ],
)
def test_redact_masks_a_bare_user_password_host(text, kept):
    assert kept in logsafe.redact(text) and PASSWORD not in logsafe.redact(text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_on(port: int) -> set[str]:
    return {
        c.laddr.ip
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }


def scrape(port: int, token: str | None) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert b"# HELP" in resp.read()
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def test_metrics_bind_loopback_by_default_and_answer_only_the_token():
    port = free_port()
    assert start_metrics_server(settings_mod.load({"JEV_METRICS_PORT": str(port), "JEV_METRICS_TOKEN": TOKEN}))
    time.sleep(0.1)
    assert listening_on(port) == {"127.0.0.1"}
    assert scrape(port, None) == 401 and scrape(port, "wrong") == 401
    assert scrape(port, TOKEN) == 200
    assert "jev_" in fetch(port, token=TOKEN), "the demo's scrape sends the token"


def test_metrics_ask_for_a_token_when_none_is_set_on_any_interface(tmp_path):
    """No JEV_METRICS_TOKEN: the token is the data directory's metrics.token (created 0600), never none."""
    open_port = free_port()
    settings = settings_mod.load(
        {"JEV_METRICS_PORT": str(open_port), "JEV_METRICS_HOST": "0.0.0.0", "JEV_DATA_DIR": str(tmp_path)}
    )
    assert start_metrics_server(settings)
    time.sleep(0.1)
    assert listening_on(open_port) == {"0.0.0.0"} and scrape(open_port, None) == 401
    token = bearer_token(settings)
    assert token == (tmp_path / "metrics.token").read_text().strip() and len(token) >= 32
    assert stat.S_IMODE(os.stat(tmp_path / "metrics.token").st_mode) == 0o600
    assert scrape(open_port, token) == 200
