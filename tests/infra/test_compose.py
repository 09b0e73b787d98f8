"""docker-compose.yml, prometheus.yml and the Grafana provisioning checked against each other and against `jev
config` (Docker cannot run on the development machines, so this is what stands between a typo and a crash loop)."""

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from streams.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
PROMETHEUS = yaml.safe_load((ROOT / "infra/prometheus/prometheus.yml").read_text())
JEV_SERVICES = [name for name, s in SERVICES.items() if s.get("command", [""])[0] == "worker"]
SETTINGS = {f"JEV_{f.name.upper()}" for f in dataclasses.fields(Settings)}


def exposed_ports(service: dict) -> set[int]:
    ports = {int(str(p).split(":")[-1].split("/")[0]) for p in service.get("ports", []) + service.get("expose", [])}
    if "JEV_METRICS_PORT" in service.get("environment", {}):
        ports.add(int(service["environment"]["JEV_METRICS_PORT"]))
    return ports


def test_jev_services_are_the_stream_and_scoring_workers():
    assert set(JEV_SERVICES) == {"stream", "score-cpu", "score-gpu"}


@pytest.mark.parametrize("service", JEV_SERVICES)
def test_every_jev_variable_is_a_setting_and_the_shared_block_survives(service):
    env = SERVICES[service]["environment"]
    unknown = {k for k in env if k.startswith("JEV_")} - SETTINGS
    assert not unknown, f"{service}: {unknown} are not settings (see `jev config`)"
    for shared in ("JEV_BROKER", "JEV_CLICKHOUSE_DSN", "JEV_METRICS_PORT", "JEV_DATA_DIR"):
        assert shared in env, f"{service} lost {shared}: its own environment replaced the shared block"


@pytest.mark.parametrize("service", JEV_SERVICES)
def test_jev_services_keep_their_data_dir_on_a_volume_and_wait_for_healthy_dependencies(service):
    s = SERVICES[service]
    data_dir = s["environment"]["JEV_DATA_DIR"]
    assert any(str(v).split(":")[1] == data_dir for v in s["volumes"]), f"{service}: {data_dir} is not a volume"
    assert all(cond == {"condition": "service_healthy"} for cond in s["depends_on"].values())
    assert "healthcheck" in s


def test_dependencies_have_healthchecks():
    for service in JEV_SERVICES:
        for dependency in SERVICES[service]["depends_on"]:
            assert "healthcheck" in SERVICES[dependency], f"{service} waits on {dependency}, which has no healthcheck"


@pytest.fixture
def own_registries(monkeypatch):
    """Loading a pool registers its tokenizers and prices process-wide: this test's stay in it."""
    from streams.models import pricing
    from streams.text import tokens

    monkeypatch.setattr(tokens, "MODEL_ENCODINGS", dict(tokens.MODEL_ENCODINGS))
    monkeypatch.setattr(pricing, "PRICES", dict(pricing.PRICES))
    yield
    tokens.encoding_name.cache_clear()
    pricing._RESOLVED.clear()


def test_the_gpu_worker_calls_vllm_serve_through_its_model_pool(own_registries):
    from streams.models import pool as pool_mod

    worker, server = SERVICES["score-gpu"], SERVICES["vllm"]
    assert worker.get("profiles") == server.get("profiles") == ["gpu"]  # started only when asked
    env = worker["environment"]
    pool = pool_mod.load(str(ROOT / env["JEV_MODELS"].removeprefix("/app/")))
    served = pool[env["JEV_BACKEND"]]
    assert env["JEV_GENERATOR"] == env["JEV_BACKEND"] and served.engine == "openai"
    command = server["command"]
    assert {"--enable-prefix-caching", "--enable-prompt-tokens-details"} <= set(command)
    assert command[command.index("--served-model-name") + 1] == served.model
    port = command[command.index("--port") + 1]
    assert served.base_url == f"http://vllm:{port}/v1" and port in server["expose"]
    assert worker["depends_on"]["vllm"] == {"condition": "service_healthy"} and "healthcheck" in server
    model_dir = served.tokenizer.removeprefix("hf:")  # Jev counts in the served model's tokenizer
    assert any(str(v).split(":")[-2] == model_dir for v in worker["volumes"])
    assert env[served.api_key_env] == "${" + served.api_key_env + ":-}"  # from the host, never written here


def test_kafka_advertises_a_listener_the_host_can_reach():
    env = SERVICES["kafka"]["environment"]
    advertised = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    published = {int(str(p).split(":")[0]) for p in SERVICES["kafka"]["ports"]}
    host_side = [a for a in advertised.values() if a.split(":")[0] == "localhost"]
    assert host_side and int(host_side[0].split(":")[1]) in published
    assert advertised["PLAINTEXT"] == "kafka:9092"  # what JEV_BROKER names inside the network
    names = {item.split(":")[0] for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")}
    assert set(advertised) <= names


def test_every_scrape_target_is_a_service_exposing_that_port():
    for job in PROMETHEUS["scrape_configs"]:
        for sd in job["dns_sd_configs"]:
            for name in sd["names"]:
                assert name in SERVICES, f"{job['job_name']}: no service {name}"
                assert sd["port"] in exposed_ports(SERVICES[name]), f"{name} does not expose {sd['port']}"
    scraped = {n for job in PROMETHEUS["scrape_configs"] for sd in job["dns_sd_configs"] for n in sd["names"]}
    assert scraped == set(JEV_SERVICES), "every Jev process is scraped"


def test_grafana_provisioning_points_at_services_and_mounts():
    grafana = SERVICES["grafana"]
    mount = next(v for v in grafana["volumes"] if v.startswith("./infra/grafana:")).split(":")[1]
    datasources = yaml.safe_load((ROOT / "infra/grafana/datasources/jev.yml").read_text())["datasources"]
    for ds in datasources:
        if "url" in ds:
            host, port = re.match(r"https?://([^:/]+):(\d+)", ds["url"]).groups()
        else:
            host, port = ds["jsonData"]["host"], ds["jsonData"]["port"]
        assert host in SERVICES and int(port) in exposed_ports(SERVICES[host]), ds["name"]
    provider = yaml.safe_load((ROOT / "infra/grafana/dashboards/jev.yml").read_text())["providers"][0]
    assert provider["options"]["path"] == f"{mount}/dashboards"
    uids = {ds["uid"] for ds in datasources}
    for dashboard in (ROOT / "infra/grafana/dashboards").glob("*.json"):
        for panel in json.loads(dashboard.read_text())["panels"]:
            if panel.get("datasource"):
                assert panel["datasource"]["uid"] in uids, panel["title"]
    assert "grafana-clickhouse-datasource" in grafana["environment"]["GF_INSTALL_PLUGINS"]


def test_prometheus_mount_holds_the_config_and_its_rules():
    mount = next(v for v in SERVICES["prometheus"]["volumes"] if v.startswith("./infra/prometheus:"))
    assert mount.split(":")[1] == "/etc/prometheus"
    for rule_file in PROMETHEUS["rule_files"]:
        assert (ROOT / "infra/prometheus" / rule_file).is_file()


def promtool() -> str:
    found = shutil.which("promtool") or str(ROOT / ".ci/tools/promtool")
    if not Path(found).is_file():
        pytest.skip("promtool is not installed (.ci/run extracts it from Debian's prometheus package)")
    return found


@pytest.mark.parametrize("check, path", [("rules", "alerts.yml"), ("config", "prometheus.yml")])
def test_promtool_accepts_the_config_and_rules(check, path, tmp_path):
    """Checked in a copy of infra/prometheus with the secrets volume's token in place (promtool reads it)."""
    shutil.copytree(ROOT / "infra/prometheus", tmp_path / "prometheus")
    (tmp_path / "prometheus/secrets/metrics.token").write_text("token-the-jev-containers-create\n")
    done = subprocess.run(
        [promtool(), "check", check, path], cwd=tmp_path / "prometheus", capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_scrape_sends_the_token_the_jev_containers_share():
    tokens = {job["authorization"]["credentials_file"] for job in PROMETHEUS["scrape_configs"]}
    assert tokens == {"secrets/metrics.token"}
    mounts = dict(v.split(":")[:2] for v in SERVICES["prometheus"]["volumes"])
    volume = next(source for source, target in mounts.items() if target == "/etc/prometheus/secrets")
    for service in JEV_SERVICES:
        env = SERVICES[service]["environment"]
        target = next(str(v).split(":")[1] for v in SERVICES[service]["volumes"] if str(v).startswith(f"{volume}:"))
        assert env["JEV_METRICS_TOKEN_FILE"] == f"{target}/metrics.token"
        assert env["JEV_SIGNING_KEY_FILE"] == f"{target}/signing.key"  # one signing key for the whole fleet


def test_the_jev_healthcheck_scrapes_with_the_metrics_token(tmp_path):
    """The workers' healthcheck, run as compose runs it, against a /metrics endpoint that asks for a token: it
    passes with the container's JEV_METRICS_TOKEN and fails without it."""
    import os
    import socket
    import sys

    from streams import settings as settings_mod
    from streams.core.metrics import start_metrics_server

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"JEV_METRICS_PORT": str(port), "JEV_METRICS_TOKEN": "health-check-token", "JEV_DATA_DIR": str(tmp_path)}
    assert start_metrics_server(settings_mod.load(env))
    test = COMPOSE["x-jev"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    command = [sys.executable, *test[2:]]
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert subprocess.run(command, env={**base, **env}, capture_output=True, timeout=60).returncode == 0
    wrong = subprocess.run(command, env={**base, **env, "JEV_METRICS_TOKEN": ""}, capture_output=True, timeout=60)
    assert wrong.returncode != 0 and b"401" in wrong.stderr
