"""Budget limits come back from the control topic after a restart; spend and open reservations come back
from the last snapshot this file keeps (written at most once a second while budgets change)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import orjson

from schemas.records import Control
from streams.budgets.book import BudgetBook, BudgetError

log = logging.getLogger("jev.budgets")


def load_book(path: Path) -> BudgetBook:
    if path.exists():
        try:
            return BudgetBook.restore(orjson.loads(path.read_bytes()), time.time)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("ignoring unreadable budget snapshot %s (%s); spend restarts at zero", path, exc)
    return BudgetBook(time.time)


def save_book(book: BudgetBook, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(orjson.dumps(book.snapshot()))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def apply_budget_controls(book: BudgetBook):
    """A Controls listener: budget records go to the book; a bad one is logged with its fix, not fatal."""

    def listener(control: Control) -> None:
        if control.kind == "budget":
            try:
                book.apply(control)
            except BudgetError as exc:
                log.warning("budget control rejected: %s", exc)

    return listener
