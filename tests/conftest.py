"""Shared fixtures: settings on a temp data dir, the shared data folder, the real local broker, model server and
ClickHouse, the one fake sender (Captured) and a stage app delivering to it (app_and_sent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from schemas.records import UsageBatch, WorkBatch
from streams import settings as settings_mod

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def settings(tmp_path):
    return settings_mod.load().replace(data_dir=str(tmp_path / "jev"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = Path(settings_mod.load().shared_data)
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path}: set JEV_SHARED_DATA to a copy of ../shared/data")
    return path


@pytest.fixture(scope="session")
def broker():
    from infra.broker import LocalBroker

    with LocalBroker() as b:
        yield b


@pytest.fixture(scope="session")
def model_server_process(tmp_path_factory):
    """The real OpenAI-compatible model server (llama.cpp, SmolLM2-135M on the CPU), started once per session with
    the cores the machine leaves idle, as `jev demo` starts it (on a busy 2-core machine, load 15, two threads
    generated 0.46 tokens/s, one thread 12 to 19 at load 10 to 12)."""
    from infra.model_server import ModelServer, idle_cores, missing

    why = missing()
    if why:
        pytest.skip(why)
    with ModelServer(log=tmp_path_factory.mktemp("model_server") / "server.log", threads=idle_cores()) as server:
        yield server


@pytest.fixture
def model_server(model_server_process):
    """The session's model server, up: `.url` is its base URL (http://127.0.0.1:PORT/v1), `.model` the model name;
    `.kill()`, `.stop()`, `.start()` and `.restart()` take it down and back on the same port. A test that leaves it
    down gets it restarted here before the next test."""
    return model_server_process.start()


@pytest.fixture(scope="session")
def vllm_server_process(tmp_path_factory):
    """The real vLLM OpenAI server (its CPU build from `make vllm`, SmolLM2-135M, prefix caching and cached-token
    details on), started once per session; skips naming `make vllm` where .venv-vllm is absent."""
    from infra.model_server import VLLMServer, vllm_missing

    why = vllm_missing()
    if why:
        pytest.skip(why)
    with VLLMServer(log=tmp_path_factory.mktemp("vllm_server") / "server.log") as server:
        yield server


@pytest.fixture
def vllm_server(vllm_server_process):
    """The session's vLLM server, up (restarted here if a test left it down): `.url`, `.model`, `.kill()`."""
    return vllm_server_process.start()


@pytest.fixture(scope="session")
def clickhouse_dsn(tmp_path_factory) -> str:
    """chdb binds one data directory per process, so every in-process ClickHouse user shares this one
    (an in-process Pipeline too: pass settings.replace(clickhouse_dsn=clickhouse_dsn) and use usage_db)."""
    return f"chdb:///{tmp_path_factory.mktemp('clickhouse')}"


@pytest.fixture(scope="session")
def clickhouse_session(clickhouse_dsn):
    """The embedded ClickHouse, migrated."""
    from infra import clickhouse

    return clickhouse.open_migrated(clickhouse_dsn)


@pytest.fixture
def usage_db(clickhouse_session):
    """The shared embedded ClickHouse with every usage table emptied."""
    from infra.clickhouse import truncate_usage

    truncate_usage(clickhouse_session)
    return clickhouse_session


def consumed(topic: str, values: list) -> list:
    """Messages as a BatchConsumer hands them to its handler (signed as Jev's Sender signs them), to call a stage's
    handler without a broker."""
    from aiokafka.structs import ConsumerRecord

    from streams.security import signing

    return [
        ConsumerRecord(
            topic=topic,
            partition=0,
            offset=offset,
            timestamp=0,
            timestamp_type=0,
            key=None,
            value=value,
            checksum=None,
            serialized_key_size=0,
            serialized_value_size=len(value or b""),
            headers=tuple(signing.headers(topic, value or b"")),
        )
        for offset, value in enumerate(values)
    ]


async def fresh_topic(broker, topic: str, partitions: int, values: list[bytes] = ()) -> str:
    """Create `topic` on the session's broker with `values` on it, the i-th on partition i % partitions, signed as
    Jev's own Sender signs them where the topic is signed; returns the bootstrap address."""
    from aiokafka import AIOKafkaProducer

    from infra.broker import create_topics
    from streams.security import signing

    bootstrap = broker.url.removeprefix("kafka://")
    await create_topics(bootstrap, [topic], partitions)
    if values:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i, value in enumerate(values):
                headers = signing.headers(topic, value) if topic in signing.SIGNED else None
                await producer.send(topic, value, partition=i % partitions, headers=headers)
        finally:
            await producer.stop()
    return bootstrap


class Captured:
    """The one fake sender: what each stage returned for delivery, by topic short name (work and usage as the
    envelopes the real Sender would send, other records as their (key, value) bytes, placed ones as (partition,
    value))."""

    def __init__(self):
        self.sent: dict[str, list] = {}
        self.outboxes: list = []

    async def deliver(self, outbox) -> None:
        if not outbox:
            return
        self.outboxes.append(outbox)
        for topic, works in outbox.work.items():
            self.sent.setdefault(topic, []).append(WorkBatch(items=works))
        if outbox.usage:
            self.sent.setdefault("usage", []).append(UsageBatch(events=outbox.usage))
        for short, records in (
            ("chunks", outbox.chunks),
            ("decisions", [d for d, _ in outbox.decisions]),
            ("review", outbox.review),
            ("rejected", outbox.dead_letters),
            ("alerts", outbox.alerts),
        ):
            if records:
                self.sent.setdefault(short, []).extend(records)
        for topic, key, value in outbox.records:
            self.sent.setdefault(topic, []).append((key, value))
        for topic, partition, value in outbox.placed:
            self.sent.setdefault(topic, []).append((partition, value))


@pytest.fixture
def app_and_sent(settings):
    captured = Captured()
    from streams.runtime.app import (
        create_app,  # the runtime, imported only by the tests that take this fixture
    )

    app = create_app(
        settings.replace(
            broker="kafka://127.0.0.1:9",
            stage_batch_wait_ms=1,
            cache_embedder="hashing",
            cache_max_error=0.0,  # fixed L2 threshold: learning is tested in tests/streams/cache
            budget_leases=0,
        ),  # no broker, so no budget owner: the book's own hard check
        {"ranking", "risk_interception"},
        sink=object(),
        sender=captured,
    )
    return app, captured
