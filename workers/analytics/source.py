"""Where analytics commands read from, and the time windows they take (--since 24h, 7d, 90m, all)."""

from __future__ import annotations

import datetime as dt
import re

from infra import clickhouse

UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str) -> dt.timedelta:
    """'90m', '24h', '7d', '2w', or 'all' (ten years)."""
    if text == "all":
        return dt.timedelta(days=3650)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([mhdw])", text.strip())
    if not m:
        raise ValueError(f"--since {text!r}: expected a number and a unit (90m, 24h, 7d, 2w) or 'all'")
    return dt.timedelta(**{UNITS[m.group(2)]: float(m.group(1))})


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def open_client(settings):
    """The migrated ClickHouse of settings.clickhouse (the embedded engine under data_dir by default)."""
    return clickhouse.open_migrated(settings.clickhouse)
