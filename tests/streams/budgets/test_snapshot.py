"""Budgets survive a restart: limits replay from the control topic, spend comes back from the snapshot."""

from schemas.records import Control
from streams.budgets.book import Refused
from streams.budgets.snapshot import apply_budget_controls, load_book, save_book


def test_spend_survives_a_restart_and_a_bad_control_is_not_fatal(tmp_path, caplog):
    path = tmp_path / "budgets.json"
    limit = Control(kind="budget", key="tenant:acme", value={"hard_tokens": 1000})
    book = load_book(path)
    apply_budget_controls(book)(limit)
    apply_budget_controls(book)(Control(kind="budget", key="tenant:acme", value={"hard_tokens": -5}))
    assert "must be a non-negative" in caplog.text
    held = book.reserve(["tenant:acme"], 700, 0.0, reservation_id="r1")
    book.settle(held, 600, 0.0)
    save_book(book, path)

    restarted = load_book(path)
    apply_budget_controls(restarted)(limit)  # the control topic is read again from the start
    assert isinstance(restarted.reserve(["tenant:acme"], 500, 0.0, reservation_id="r2"), Refused)
    assert not isinstance(restarted.reserve(["tenant:acme"], 400, 0.0, reservation_id="r3"), Refused)


def test_an_unreadable_snapshot_starts_from_zero_with_a_warning(tmp_path, caplog):
    path = tmp_path / "budgets.json"
    path.write_bytes(b"{not json")
    book = load_book(path)
    assert book.snapshot()["usage"] == {} and "unreadable budget snapshot" in caplog.text
