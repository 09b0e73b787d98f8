"""The sandbox child (`python -m workers.analytics.sandbox.child DIR PARENT_PID`): it holds its own process to
the caller's limits, loads the exported tables and views into a private engine, runs the caller's work there
under those limits, and writes its answer as one JSON line."""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
import threading
from pathlib import Path

import orjson

from infra.clickhouse.access import identifier
from workers.analytics import tenancy
from workers.analytics.sandbox.errors import public_error
from workers.analytics.sandbox.limits import ENGINE_FIRST_S, Limited, Limits

READ_STATEMENTS = ("select", "with")
LOADED = "loaded"  # the file the child writes once its tables are loaded: its query time starts then
TIMED_OUT = 3  # the child's exit code when it stopped itself at its time limit


def check_read_only(sql: str) -> None:
    """One SELECT (or WITH … SELECT), writing no file; the statement kind is checked before any parse."""
    body = sql.strip().rstrip(";").strip()
    if not body or ";" in body or body.split(None, 1)[0].lower() not in READ_STATEMENTS:
        raise ValueError("only one read-only statement is allowed: a SELECT (or WITH … SELECT)")
    if re.search(r"\boutfile\b", body, flags=re.I):
        raise ValueError("INTO OUTFILE is not allowed: the query would write a file; fetch rows with --json instead")


def finalized(client, sql: str) -> str:
    """`sql` with each aggregate state it returns finalized to its value (the uniq `requests` state of
    usage_by_session_hour and usage_by_business_day): the client cannot read a state, and the analyst wants the
    number, so `SELECT *` works on every table."""
    columns = [(name, kind) for name, kind, *_ in client.query(f"DESCRIBE ({sql})").result_rows]
    if not any(kind.startswith("AggregateFunction(") for _, kind in columns):
        return sql
    quoted = [identifier(name) for name, _ in columns]
    return "SELECT {} FROM ({})".format(
        ", ".join(
            f"finalizeAggregation({q}) AS {q}" if kind.startswith("AggregateFunction(") else q
            for q, (_, kind) in zip(quoted, columns)
        ),
        sql,
    )


def run_query(client, sql: str) -> dict:
    """The caller's own SQL: read-only, Jev's tables only (checked on ClickHouse's parse), rows as JSON lists."""
    check_read_only(sql)
    tenancy.check_query(client, sql)
    result = client.query(finalized(client, sql))
    return {"columns": list(result.column_names), "rows": [list(r) for r in result.result_rows]}


def window(body: dict, default: str) -> tuple[dt.datetime, dt.datetime]:
    from workers.analytics import source

    now = source.now()
    return now - source.parse_since(body.get("since") or default), now


def report_of(client, body: dict) -> dict:
    from workers.analytics import report

    since, now = window(body, "7d")
    return report.collect(client, since, now, body.get("by", "service"))


def stacks_of(client, body: dict) -> dict:
    from workers.analytics import flamegraph

    since, _ = window(body, "24h")
    return {"stacks": flamegraph.folded(client, since, "", body.get("service", ""), body.get("weight", "tokens"))}


def alerts_of(client, body: dict) -> dict:
    from workers.analytics import alerts, source

    base = alerts.Thresholds()
    changes = {
        k: type(getattr(base, k))(v)
        for k, v in (body.get("set") or {}).items()
        if k in alerts.Thresholds.__dataclass_fields__ and k != "daily_budgets"
    }
    thresholds = base.replace(**changes, daily_budgets={k: int(v) for k, v in (body.get("budgets") or {}).items()})
    return {"alerts": [a.asdict() for a in alerts.evaluate_alerts(client, thresholds, source.now())]}


ENDPOINTS = {
    "query": lambda client, body: run_query(client, body.get("sql", "")),
    "report": report_of,
    "flamegraph": stacks_of,
    "alerts": alerts_of,
}


def lower_self(parent: int) -> None:
    """First thing in the child: the idle CPU class (it runs only on CPU time the pipeline leaves; nice 19 where
    the scheduler has no idle class), and death with its parent (exit now if the parent is already gone). Done
    here rather than in a preexec_fn, so the parent spawns the child without forking its own large heap."""
    from infra.broker import die_with_parent

    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)
    die_with_parent()
    if os.getppid() != parent:
        sys.exit(1)


def stop_when_over(limits: Limits) -> threading.Timer:
    """From now, JEV_QUERY_TIME_S for the work (and ENGINE_FIRST_S, so a query the engine stops at that limit
    says so itself): then the child says so and exits, whatever its main thread is doing (the parent kills it
    if even this cannot run)."""

    def stop() -> None:
        os.write(1, orjson.dumps({"error": limits.over_time()}) + b"\n")
        os._exit(TIMED_OUT)

    timer = threading.Timer(limits.time_s + ENGINE_FIRST_S, stop)
    timer.daemon = True
    timer.start()
    return timer


def serve(work: Path, limits: Limits) -> dict:
    """Load the exported tables and views into a private engine, run the endpoint, return its answer."""
    import clickhouse_connect

    spec = orjson.loads((work / "spec.json").read_bytes())
    client = clickhouse_connect.get_client(dsn=f"chdb://{work / 'engine'}")
    for name in spec["tables"]:
        client.command((work / f"{name}.sql").read_text())
        native = work / f"{name}.native"
        data = native.read_bytes() if native.exists() else b""  # a view has no rows of its own
        native.unlink(missing_ok=True)
        if data:
            client.raw_insert(name, insert_block=data, fmt="Native", settings={"max_partitions_per_insert_block": 0})
    (work / LOADED).touch()
    timer = stop_when_over(limits)
    try:
        return {"result": ENDPOINTS[spec["endpoint"]](Limited(client, limits), spec["body"])}
    except tenancy.Refused as e:
        return {"error": str(e)}
    except MemoryError:
        return {"error": limits.over_memory()}
    except ValueError as e:
        return {"error": str(e) if "DB::Exception" not in str(e) else public_error(e)}
    except Exception as e:
        return {"error": limits.over_memory() if "bad_alloc" in str(e) else public_error(e)}
    finally:
        timer.cancel()


def main(work: Path, parent: int) -> None:
    lower_self(parent)
    limits = Limits(**orjson.loads((work / "spec.json").read_bytes())["limits"])
    limits.hold_this_process()
    try:
        line = orjson.dumps(serve(work, limits), default=str)
    except MemoryError:
        line = orjson.dumps({"error": limits.over_memory()})
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
