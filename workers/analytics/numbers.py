"""Numbers formatted for people, one rule per kind of column: tokens with thousands separators, costs in dollars
with enough digits to tell small amounts apart, shares as percentages. The report's HTML and tables use it."""

from __future__ import annotations

import math

SHARE_COLUMNS = ("share", "ratio", "efficiency", "rate", "te", "cp", "hr", "mu")


def tokens(v) -> str:
    return f"{int(round(v)):,}"


def dollars(v: float) -> str:
    """$1,234.50; $0.0123; $0.00000214: at least two decimals, and three significant digits below a dollar."""
    if not v:
        return "$0"
    if abs(v) >= 1:
        return f"${v:,.2f}"
    digits = max(2, 2 - math.floor(math.log10(abs(v))))
    return f"${v:.{digits}f}"


def percent(v: float) -> str:
    return f"{v:.1%}"


def cell(column: str, v) -> str:
    """A table cell by its column: cost → dollars, a share → percent, a count → thousands, other floats → 1 dp."""
    if v is None:
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if "cost" in column:
        return dollars(v)
    if any(column == k or column.endswith(f"_{k}") for k in SHARE_COLUMNS):
        return percent(v)
    if isinstance(v, int):
        return tokens(v)
    return f"{v:,.1f}" if abs(v) >= 10 or v == int(v) else f"{v:,.3g}"
