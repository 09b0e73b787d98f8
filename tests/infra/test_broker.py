import socket

import pytest

from infra.broker import LocalBroker, free_port, wait_ready


def test_local_broker_answers_kafka_metadata_and_stops():
    with LocalBroker() as b:
        wait_ready("127.0.0.1", b.port, timeout=2)
        pid = b.proc.pid
    assert b.proc.poll() is not None, f"tansu {pid} still running after stop"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", b.port), timeout=0.5)


def test_wait_ready_names_the_address_when_nothing_answers():
    port = free_port()
    with pytest.raises(TimeoutError, match=f"127.0.0.1:{port}"):
        wait_ready("127.0.0.1", port, timeout=0.3)


async def test_create_topics_sets_the_registrys_topic_configs():
    """The control and requests-seen topics are created compacted, the cache-state topic bounded by age; the local
    broker stores and describes these configs (it never compacts: Apache Kafka does)."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from infra.broker import create_topics
    from schemas.topics import TOPICS, name

    with LocalBroker() as b:
        bootstrap = b.url.removeprefix("kafka://")
        await create_topics(bootstrap, [t.name for t in TOPICS.values()], 2)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            shorts = ("control", "requests_seen", "cache_state", "budget")
            [response] = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name(s)) for s in shorts]
            )
        finally:
            await admin.close()
    found = {resource[3]: {entry[0]: entry[1] for entry in resource[4]} for resource in response.resources}
    assert found[name("control")]["cleanup.policy"] == "compact"
    assert found[name("requests_seen")]["cleanup.policy"] == "compact"
    assert found[name("cache_state")] == {"cleanup.policy": "delete", "retention.ms": "604800000"}
    assert "cleanup.policy" not in found[name("budget")]  # a log folded from its start: never compacted
