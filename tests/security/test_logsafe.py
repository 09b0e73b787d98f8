"""Secrets never reach the logs: DSN passwords, bearer tokens and API keys are redacted in every record."""
from __future__ import annotations

import logging

import pytest

from streams import logsafe


@pytest.mark.parametrize("text, secret, kept", [
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
])
def test_redact_removes_the_secret_and_keeps_the_context(text, secret, kept):
    out = logsafe.redact(text)
    assert secret not in out
    assert kept in out


@pytest.mark.parametrize("text", ["chdb:///tmp/jev/clickhouse", "http://clickhouse:8123/jev", "tokens=512 cost=0.01",
                                  "input_tokens: 42", "kafka://127.0.0.1:19092"])
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
