"""The query endpoint's read-only guard must not leave the embedded engine read-only for its owner."""
import pytest

from workers.analytics.owner import check_read_only, run_query


@pytest.mark.parametrize("sql", ["DROP TABLE usage_events", "INSERT INTO usage_events SELECT * FROM usage_events",
                                 "SELECT 1; DROP TABLE usage_events", "", "SET readonly = 0", "ALTER TABLE x DELETE"])
def test_writes_and_multiple_statements_are_refused(sql):
    with pytest.raises(ValueError, match="only one read-only statement"):
        check_read_only(sql)


def test_into_outfile_is_refused():
    with pytest.raises(ValueError, match="would write a file"):
        check_read_only("SELECT 1 INTO  OUTFILE '/tmp/x.csv'")


def test_a_refused_write_leaves_the_owner_able_to_write(usage_db):
    with pytest.raises(ValueError):
        run_query(usage_db, "TRUNCATE TABLE usage_events")
    assert run_query(usage_db, "WITH 2 AS x SELECT x")["rows"] == [[2]]
    usage_db.command("TRUNCATE TABLE IF EXISTS usage_events")  # the sink's session can still write
