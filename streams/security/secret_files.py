"""Secrets kept in files (the signing key, the /metrics token): read one, or create it when missing.

A created secret is 32 random bytes as hex, mode 0600 from its first byte, and appears atomically: it is written
to a temporary file and hard-linked into place, which fails when another process linked its own first, so
processes starting together on one directory (or one shared volume) all end up with the same secret.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

log = logging.getLogger("jev.secrets")
MIN_BYTES = 16


class SecretFileError(ValueError):
    pass


def read(path: Path, setting: str) -> bytes:
    """The secret in `path` (surrounding white space stripped); SecretFileError naming `setting` and the fix."""
    try:
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise SecretFileError(
            f"cannot read {path} ({exc.strerror}): set {setting} to a readable file of at least {MIN_BYTES} bytes"
        ) from None
    if len(secret) < MIN_BYTES:
        raise SecretFileError(
            f"{path} holds {len(secret)} bytes: write at least {MIN_BYTES} random bytes into it "
            f"(e.g. `openssl rand -hex 32 > {path}`), or point {setting} elsewhere"
        )
    return secret


def ensure(path: Path, setting: str) -> bytes:
    """The secret in `path`, created first when the file does not exist."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        try:
            os.link(temporary, path)
            log.warning("created %s, a new random secret (%s)", path, setting)
        except FileExistsError:
            pass
        finally:
            temporary.unlink(missing_ok=True)
    return read(path, setting)
