"""Secrets never reach the logs: DSN passwords, bearer tokens and API keys are redacted in every record."""

from __future__ import annotations

import logging

import pytest

from streams.security import logsafe


@pytest.mark.parametrize(
    "text, secret, kept",
    [
        ("connecting to http://default:s3cr3t-pw@clickhouse:8123/jev", "s3cr3t-pw", "http://default:***@clickhouse"),
        ("dsn=clickhouse://analyst:hunter2@db/usage", "hunter2", "analyst:***@db"),
        ("kafka bootstrap sasl_ssl://svc:p%40ss@broker:9093", "p%40ss", "svc:***@broker"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc123", "eyJhbGciOiJIUzI1NiJ9", "Bearer ***"),
        ("headers={'Authorization': 'Basic dXNlcjpwYXNz'}", "dXNlcjpwYXNz", "Basic ***"),
        ('{"api_key": "abcd-1234-efgh", "model": "gpt-4o"}', "abcd-1234-efgh", '"model": "gpt-4o"'),
        ("OPENAI key sk-proj-AbCdEfGhIjKlMnOpQrStUv used", "sk-proj-AbCdEfGhIjKlMnOpQrStUv", "OPENAI key"),
        ("password=letmein&user=bob", "letmein", "user=bob"),
        ("token: tkn_9f8e7d6c", "tkn_9f8e7d6c", "token: ***"),
        ("aws AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP", "aws ***"),
    ],
)
def test_redact_removes_the_secret_and_keeps_the_context(text, secret, kept):
    out = logsafe.redact(text)
    assert secret not in out
    assert kept in out


@pytest.mark.parametrize(
    "text",
    [
        "chdb:///tmp/jev/clickhouse",
        "http://clickhouse:8123/jev",
        "tokens=512 cost=0.01",
        "input_tokens: 42",
        "kafka://127.0.0.1:19092",
    ],
)
def test_redact_leaves_ordinary_text_alone(text):
    assert logsafe.redact(text) == text


@pytest.fixture
def captured():
    records: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record):
            records.append(self.format(record))

    handler = Capture()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("jev.test.logsafe")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    factory = logging.getLogRecordFactory()
    logsafe.install()
    logsafe.install()  # idempotent
    yield logger, records
    logging.setLogRecordFactory(factory)
    logger.removeHandler(handler)


def test_installed_redaction_covers_arguments_and_exceptions(captured):
    logger, records = captured
    logger.info("sink %s failed", "http://default:topsecret@ch:8123")
    logger.warning("retry with %(auth)s", {"auth": "Bearer abcdef123456"})
    try:
        raise ConnectionError("cannot reach clickhouse://u:pw-in-exception@db")
    except ConnectionError:
        logger.exception("insert failed")
    logger.info("%d%% of %d rows", 100, 5)
    text = "\n".join(records)
    for secret in ("topsecret", "abcdef123456", "pw-in-exception"):
        assert secret not in text
    assert "100% of 5 rows" in text
    assert "default:***@ch" in text and "Bearer ***" in text


async def test_debug_logging_never_writes_a_prompt(tmp_path):
    """The issue's probe: JEV_LOG_LEVEL=debug wrote raw prompt text (aiokafka's requests and its producer's
    "Sending … value=…", Faust's "send: … v=…"). A real producer and consumer at DEBUG, every record captured."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from infra.broker import LocalBroker

    prompt = "PROMPT-MARKER my card number is 4111 1111 1111 1111"
    records: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record):
            records.append(f"{record.name} {self.format(record)}")

    root, handler = logging.getLogger(), Capture(level=logging.DEBUG)
    level, factory = root.level, logging.getLogRecordFactory()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    logsafe.install()
    try:
        with LocalBroker() as broker:
            bootstrap = broker.url.removeprefix("kafka://")
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
            await producer.start()
            await producer.send_and_wait("jev.requests.v1", f'{{"state": "{prompt}"}}'.encode())
            await producer.stop()
            consumer = AIOKafkaConsumer("jev.requests.v1", bootstrap_servers=bootstrap, auto_offset_reset="earliest")
            await consumer.start()
            fetched = await consumer.getmany(timeout_ms=5000)
            await consumer.stop()
        logging.getLogger("faust.topics").debug("send: topic=%r v=%r", "t", prompt)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        logging.setLogRecordFactory(factory)
    assert any(prompt.encode() in m.value for msgs in fetched.values() for m in msgs)
    assert any(r.startswith("aiokafka") for r in records)  # the libraries did log at INFO and above
    assert not [r for r in records if "PROMPT-MARKER" in r]
