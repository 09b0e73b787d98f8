"""Keep secrets out of logs: redact DSN passwords, bearer tokens and API keys, and never log message payloads
(prompt text) at any level.

install() wraps the log record factory, so every record from every logger is redacted when it is created, before
any handler; RedactingFilter does it for one handler. The library loggers that print whole Kafka messages are held
at INFO, so JEV_LOG_LEVEL=debug never shows a prompt.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Callable

MASK = "***"
PATTERNS = [
    # scheme://user:password@host  (ClickHouse/Kafka/HTTP DSNs)
    (re.compile(r"(?P<keep>\b[a-z][a-z0-9+._-]*://[^\s:/@]*:)[^\s@/]+(?=@)", re.I), r"\g<keep>" + MASK),
    # user:password@host without a scheme (a Kafka bootstrap as aiokafka is given it)
    (
        re.compile(r"(?<![\w/:.-])(?P<keep>[A-Za-z0-9._%-]+:)[^\s@/:]+(?=@[A-Za-z0-9.-]+(?::\d+)?\b)"),
        r"\g<keep>" + MASK,
    ),
    # Authorization: Bearer <token>, Basic <b64>
    (re.compile(r"(?P<keep>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{6,}", re.I), r"\g<keep>" + MASK),
    # password=…, token: …, api_key=…, secret=…  (key=value, key: value, JSON "key": "value")
    (
        re.compile(
            r"(?P<keep>\b(?:password|passwd|pwd|token|api[_-]?key|secret|access[_-]?key)\"?\s*[=:]\s*\"?)"
            r"[^\s\"',;&]+",
            re.I,
        ),
        r"\g<keep>" + MASK,
    ),
    # well-known key shapes: OpenAI sk-…, AWS access key ids
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), MASK),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), MASK),
]


def redact(text: str) -> str:
    for pattern, replacement in PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactingFilter(logging.Filter):
    """Formats the record's message once, redacts it, and drops args so no handler sees the raw values."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is logged as-is rather than lost
            message = str(record.msg)
        record.msg, record.args = redact(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


FILTER = RedactingFilter()
# Library loggers whose debug records carry message payloads: aiokafka's requests and responses (record batches)
# and its producer's "Sending (key=… value=…)", Faust's topic and producer "send: … v=…".
PAYLOAD_LOGGERS = ("aiokafka", "faust.topics", "faust.transport.drivers.aiokafka")


_REDACTING: set[Callable[..., logging.LogRecord]] = set()  # the factories install() made


def install() -> None:
    """Redact every log record of this process from now on, and keep payload debug records out (idempotent)."""
    factory = logging.getLogRecordFactory()
    for name in PAYLOAD_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.level, logging.INFO))
    if factory in _REDACTING:
        return

    def redacting_factory(*args, **kwargs) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        FILTER.filter(record)
        return record

    _REDACTING.add(redacting_factory)
    logging.setLogRecordFactory(redacting_factory)


class RedactingStream:
    """A text stream that redacts what is written to it before passing it on (a command's stderr)."""

    def __init__(self, inner):
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(redact(text))
        return len(text)

    def __getattr__(self, attr):
        return getattr(self.inner, attr)


@contextlib.contextmanager
def redacted_stderr():
    """sys.stderr redacted for the duration: every error a command prints passes redact()."""
    inner = sys.stderr
    sys.stderr = RedactingStream(inner)
    try:
        yield
    finally:
        sys.stderr = inner
