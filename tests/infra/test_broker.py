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
