"""Signatures on the records only Jev writes and then acts on: every internal topic, control and verdicts.

Any client with write access to the broker could otherwise raise a budget, grant itself a lease, plant a decision
or rewrite a bill. Every producer signs each message (HMAC-SHA256 over b"jev-v1", the topic and the value, header
`jev-sig: <key id>:<hex>`) and every consumer refuses one unsigned or wrongly signed: logged, counted in
`jev_forged_records_total{topic}`, not applied. Keys (JEV_SIGNING_KEY_FILE) rotate as new,old; the default key is
created in the data directory. One keyring per process (`configure(settings)`); docs/operations.md has the setup.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from pathlib import Path

from schemas.topics import TOPICS
from streams.security import secret_files

log = logging.getLogger("jev.signing")

# Written by Jev alone and read back by it: the internal topics, and the two external ones a process acts on
# (control: `jev switch set` signs; verdicts: the shadow guard turns them into controls). The inputs (requests,
# batch) are the producers' and are checked by tenant key instead; the outputs are only read by callers.
SIGNED = frozenset(spec.name for short, spec in TOPICS.items() if not spec.external or short in ("control", "verdicts"))
HEADER = "jev-sig"
KEY_FILE = "signing.key"
LOG_EVERY_S = 10.0  # refusals of one topic and reason are logged at most this often (with the count between)


class SigningKeyError(ValueError):
    pass


SETTING = "JEV_SIGNING_KEY_FILE"


class Keyring:
    """The keys of one process: `keys[0]` signs, any of them verifies."""

    def __init__(self, keys: list[bytes]):
        if not keys:
            raise SigningKeyError("a keyring needs at least one key")
        self.keys = {key_id(k): k for k in keys}
        self.signing_id, self.signing_key = key_id(keys[0]), keys[0]

    def headers(self, topic: str, value: bytes) -> list[tuple[str, bytes]]:
        """The headers of a message of `topic` (full name) with `value`: the signature on a signed topic."""
        if topic not in SIGNED:
            return []
        return [(HEADER, f"{self.signing_id}:{digest(self.signing_key, topic, value)}".encode())]

    def problem(self, topic: str, value: bytes | None, headers) -> str:
        """Why a message of `topic` is not to be trusted ("" when it is, or the topic is not signed)."""
        if topic not in SIGNED:
            return ""
        found = [v for k, v in headers or () if k == HEADER]
        if not found:
            return "unsigned"
        kid, _, sig = bytes(found[-1] or b"").partition(b":")  # whatever bytes a forger put there
        key = self.keys.get(kid.decode("ascii", "replace"))
        if key is None:
            return f"signed with an unknown key ({kid[:16]!r}; this process knows {', '.join(self.keys)})"
        if not hmac.compare_digest(sig, digest(key, topic, value or b"").encode()):
            return "bad signature"
        return ""


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


def digest(key: bytes, topic: str, value: bytes) -> str:
    return hmac.new(key, b"jev-v1\x00" + topic.encode() + b"\x00" + value, hashlib.sha256).hexdigest()


def key_files(settings) -> list[Path]:
    """The key files in effect: JEV_SIGNING_KEY_FILE's, else <data_dir>/signing.key."""
    named = [p.strip() for p in settings.signing_key_file.split(",") if p.strip()]
    return [Path(p) for p in named] or [Path(settings.data_dir).resolve() / KEY_FILE]


def load(settings) -> Keyring:
    """The keyring of `settings`: the first key file signs (created when missing, as <data_dir>/signing.key is),
    the others only verify and must exist."""
    files = key_files(settings)
    try:
        return Keyring([secret_files.ensure(files[0], SETTING)] + [secret_files.read(p, SETTING) for p in files[1:]])
    except secret_files.SecretFileError as exc:
        raise SigningKeyError(f"signing key: {exc}") from None


_current: Keyring | None = None


def configure(settings) -> Keyring:
    global _current
    _current = load(settings)
    return _current


def keyring() -> Keyring:
    if _current is None:
        from streams import settings as settings_mod

        return configure(settings_mod.load())
    return _current


def headers(topic: str, value: bytes) -> list[tuple[str, bytes]]:
    """The signature headers of a message of `topic` (full name) with `value`, by this process's keyring."""
    return keyring().headers(topic, value)


_logged: dict[tuple[str, str], list] = {}


def refuse(topic: str, reason: str, where: str = "") -> None:
    """Count and log a refused internal record (throttled per topic and reason)."""
    from streams.core.metrics import observe_forged

    observe_forged(topic)
    entry = _logged.setdefault((topic, reason.split(" (")[0]), [0.0, 0])
    entry[1] += 1
    now = time.monotonic()
    if now - entry[0] >= LOG_EVERY_S:
        log.warning(
            "refused %d record(s) on %s that Jev did not write: %s%s; only Jev's processes (holding the "
            "signing key) may write this topic: check the broker's ACLs and who holds write access",
            entry[1],
            topic,
            reason,
            f" (latest at {where})" if where else "",
        )
        entry[0], entry[1] = now, 0


def check(message) -> str:
    """Why a consumed message (aiokafka's, or anything with topic, partition, offset, value, headers) may not be
    applied ("" when it may); a refusal is counted and logged."""
    reason = keyring().problem(message.topic, message.value, message.headers)
    if reason:
        refuse(message.topic, reason, f"partition {message.partition} offset {message.offset}")
    return reason


def trusted(message) -> bool:
    return not check(message)


def quietly_trusted(message) -> bool:
    """`trusted` without counting or logging: for a second read of records already judged (a re-scan)."""
    return not keyring().problem(message.topic, message.value, message.headers)
