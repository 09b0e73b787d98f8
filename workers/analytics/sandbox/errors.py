"""What a caller may see when its analytics work fails: never row data."""

from __future__ import annotations

import re

CODE = re.compile(r"Code: (\d+)\.")
NAME = re.compile(r"\s*\(([A-Z][A-Z_]+)\)")
VERSION = re.compile(r"\s*\(version [^)]*\)")
QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`\\]|\\.)*`")


class QueryFailed(RuntimeError):
    """The caller's work failed in its sandbox; the message is safe to return to the caller."""


def public_error(e: BaseException) -> str:
    """An error as the caller may see it: ClickHouse's error name and the head of its message, quoted values
    and everything after the first colon removed (that is where ClickHouse quotes rows and values)."""
    text = str(e).strip()
    code = CODE.search(text)
    if not code:
        return QUOTED.sub("'…'", text.split("\n", 1)[0]).split(": ", 1)[0][:300]
    names = NAME.findall(text)
    message = QUOTED.sub("'…'", text.rsplit("DB::Exception:", 1)[-1]).strip()
    head = NAME.sub("", VERSION.sub("", message.split(": ", 1)[0])).strip().rstrip(".")
    return f"{names[-1] if names else 'ERROR'} (ClickHouse code {code.group(1)}): {head[:200]}"
