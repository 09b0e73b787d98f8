"""Usage-sink throughput into the embedded ClickHouse vs a raw clickhouse-connect column insert of the same rows.

Both write the same events into the same migrated usage_events (materialized views included), in batches of
settings.sink_batch_max, tables emptied between runs. The raw insert gets its columns prebuilt and does no
dedup; the sink starts from UsageEvent records, builds columns, and looks up stored event ids first.
ratio_to_raw = sink rows/s ÷ raw rows/s (best of --repeat runs each). Last stdout line: one JSON object.

    .venv/bin/python bench/sink.py [--requests 20000] [--repeat 2]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time

import orjson

from infra import clickhouse
from infra.clickhouse import USAGE_COLUMNS
from streams import settings as settings_mod
from streams.usage.sink import UsageSink, to_columns
from workers.analytics.sample import usage_events


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000, help="decided requests (≈3.7 usage events each)")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    batch = settings_mod.load().sink_batch_max
    events = usage_events(args.requests, time.time() - 86400, span_s=86400)
    batches = [events[i:i + batch] for i in range(0, len(events), batch)]
    prebuilt = [to_columns(b) for b in batches]
    with tempfile.TemporaryDirectory() as folder:
        client = clickhouse.open_migrated(f"chdb:///{folder}")

        def raw():
            for columns in prebuilt:
                client.insert("usage_events", columns, column_names=USAGE_COLUMNS, column_oriented=True)

        def sink():
            s = UsageSink(client)
            for b in batches:
                s.insert(b)

        times = {"raw": [], "sink": []}
        for run in range(args.repeat):
            for name, fn in (("raw", raw), ("sink", sink)):
                clickhouse.truncate_usage(client)
                times[name].append(timed(fn))
                print(f"run {run + 1} {name}: {len(events) / times[name][-1]:,.0f} rows/s", file=sys.stderr)
        stored = client.query("SELECT count() FROM usage_events").result_rows[0][0]
    raw_rps, sink_rps = (len(events) / min(times[k]) for k in ("raw", "sink"))
    print(orjson.dumps({"rows": len(events), "batch": batch, "stored": stored, "raw_rows_per_s": round(raw_rps),
                        "sink_rows_per_s": round(sink_rps), "ratio_to_raw": round(sink_rps / raw_rps, 3)}).decode())


if __name__ == "__main__":
    main()
