"""Shared fixtures: settings on a temp data dir, the shared data folder, the real local broker."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

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
    """Messages as a BatchConsumer hands them to its handler, to call a stage's handler without a broker."""
    from aiokafka.structs import ConsumerRecord

    return [ConsumerRecord(topic=topic, partition=0, offset=offset, timestamp=0, timestamp_type=0, key=None,
                           value=value, checksum=None, serialized_key_size=0,
                           serialized_value_size=len(value or b""), headers=())
            for offset, value in enumerate(values)]


async def fresh_topic(broker, topic: str, partitions: int, values: list[bytes] = ()) -> str:
    """Create `topic` on the session's broker with `values` on it, the i-th on partition i % partitions;
    returns the bootstrap address."""
    from aiokafka import AIOKafkaProducer

    from infra.broker import create_topics

    bootstrap = broker.url.removeprefix("kafka://")
    await create_topics(bootstrap, [topic], partitions)
    if values:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i, value in enumerate(values):
                await producer.send(topic, value, partition=i % partitions)
        finally:
            await producer.stop()
    return bootstrap
