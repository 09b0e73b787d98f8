"""Usage-sink throughput into the embedded ClickHouse vs a raw clickhouse-connect insert of the same rows.

Both write the same UsageEvent records into the migrated usage_events (views included), in batches of
settings.sink_batch_max. The sink does what it does in the stage (dedup probe, columns, insert, metrics); the raw
insert builds the columns and inserts; `prebuilt` inserts columns built before the clock starts. After a warm-up,
--rounds rounds time the passes back to back in rotating order. ratio_to_raw = the median of raw ÷ sink seconds;
`sink_ms_per_batch` splits the sink's time. Last stdout line: one JSON object.

    .venv/bin/python bench/sink.py [--requests 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import orjson

from infra import clickhouse
from infra.clickhouse import USAGE_COLUMNS
from streams import settings as settings_mod
from streams.core import metrics
from streams.runtime.usage_sink import UsageSink, to_columns
from workers.analytics.sample import usage_events


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def sink_parts(client, batches: list) -> dict[str, float]:
    """Median ms per batch of each part of UsageSink.insert, run one after the other as insert runs them."""
    sink, parts = UsageSink(client), {"probe": [], "columns": [], "insert": [], "metrics": []}
    for batch in batches:
        t0 = time.perf_counter()
        fresh = sink.new_events(batch)
        t1 = time.perf_counter()
        columns = to_columns(fresh)
        t2 = time.perf_counter()
        client.insert("usage_events", columns, column_names=USAGE_COLUMNS, column_oriented=True)
        t3 = time.perf_counter()
        metrics.observe_sink(fresh, len(batch) - len(fresh), t3 - t0)
        t4 = time.perf_counter()
        for part, seconds in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            parts[part].append(seconds)
    return {part: round(statistics.median(seconds) * 1000, 1) for part, seconds in parts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000, help="decided requests (≈3.7 usage events each)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds after the warm-up; medians are reported")
    args = ap.parse_args()
    batch = settings_mod.load().sink_batch_max
    events = usage_events(args.requests, time.time() - 86400, span_s=86400)
    batches = [events[i : i + batch] for i in range(0, len(events), batch)]
    built = [to_columns(b) for b in batches]
    with tempfile.TemporaryDirectory() as folder:
        client = clickhouse.open_migrated(f"chdb:///{folder}")

        def insert(columns_of):
            for b in batches:
                client.insert("usage_events", columns_of(b), column_names=USAGE_COLUMNS, column_oriented=True)

        def sink():
            s = UsageSink(client)
            for b in batches:
                s.insert(b)

        prebuilt = iter(())
        passes = {"raw": lambda: insert(to_columns), "sink": sink, "prebuilt": lambda: insert(lambda _: next(prebuilt))}
        seconds: dict[str, list[float]] = {name: [] for name in passes}
        for round_ in range(args.rounds + 1):  # round 0 warms up
            order = list(passes)[round_ % 3 :] + list(passes)[: round_ % 3]
            for name in order:
                clickhouse.truncate_usage(client)
                prebuilt = iter(built)
                took = timed(passes[name])
                if round_:
                    seconds[name].append(took)
                print(
                    f"round {round_}{' (warm-up)' if not round_ else ''} {name}: {len(events) / took:,.0f} rows/s",
                    file=sys.stderr,
                )
        stored = client.query("SELECT count() FROM usage_events").result_rows[0][0]
        clickhouse.truncate_usage(client)
        parts = sink_parts(client, batches)
    ratio = statistics.median(r / s for r, s in zip(seconds["raw"], seconds["sink"]))
    to_prebuilt = statistics.median(p / s for p, s in zip(seconds["prebuilt"], seconds["sink"]))
    rows_per_s = {name: round(len(events) / statistics.median(s)) for name, s in seconds.items()}
    print(
        orjson.dumps(
            {
                "rows": len(events),
                "batch": batch,
                "batches": len(batches),
                "rounds": args.rounds,
                "stored": stored,
                "raw_rows_per_s": rows_per_s["raw"],
                "prebuilt_rows_per_s": rows_per_s["prebuilt"],
                "sink_rows_per_s": rows_per_s["sink"],
                "ratio_by_round": [round(r / s, 3) for r, s in zip(seconds["raw"], seconds["sink"])],
                "sink_ms_per_batch": parts,
                "ratio_to_prebuilt": round(to_prebuilt, 3),
                "ratio_to_raw": round(ratio, 3),
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
