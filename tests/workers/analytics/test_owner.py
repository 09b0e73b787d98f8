"""The read-only guard every caller's SQL passes before its sandbox runs it."""

import pytest

from workers.analytics.sandbox.child import check_read_only


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE usage_events",
        "INSERT INTO usage_events SELECT * FROM usage_events",
        "SELECT 1; DROP TABLE usage_events",
        "",
        "SET readonly = 0",
        "ALTER TABLE x DELETE",
        "SHOW TABLES",
        "DESCRIBE TABLE system.users",
        "EXISTS TABLE usage_event_ids",
    ],
)
def test_writes_other_statements_and_multiple_statements_are_refused(sql):
    with pytest.raises(ValueError, match="only one read-only statement"):
        check_read_only(sql)


def test_into_outfile_is_refused():
    with pytest.raises(ValueError, match="would write a file"):
        check_read_only("SELECT 1 INTO  OUTFILE '/tmp/x.csv'")
