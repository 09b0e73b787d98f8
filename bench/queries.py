"""The four-level queries (request, session, service, business) over N usage rows on the embedded ClickHouse.

Rows are generated inside ClickHouse (four events per request over 7 days, 50,000 sessions), so the materialized
views fill as from the sink; each level's query runs --repeat times over the 7 days, the best time counting, and the
flame-graph fold and alert rules are timed too. Last stdout line: one JSON object (max_query_s, the slowest level;
target < 1 s at 10M rows).

    .venv/bin/python bench/queries.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time

import orjson

from infra import clickhouse
from workers.analytics import alerts, flamegraph, levels

GENERATE = """
INSERT INTO usage_events (event_id, request_id, ts, tenant, service, business_line, session_id, user_id,
  decision_type, stage, stack, model, input_tokens, cache_read_tokens, output_tokens, nominal_tokens, candidates,
  beam, iteration, latency_ms, cost, outcome, business_event)
SELECT * EXCEPT (section) FROM (
SELECT concat(rid, ':', stage, if(section = '', '', concat(':', section))) AS event_id, rid AS request_id,
  fromUnixTimestamp64Milli(toInt64({start:Int64} + intDiv(number, 4) * {step:Float64})) AS ts,
  concat('t', toString(req % 3)) AS tenant, ['supply-chain', 'payments', 'search', 'support'][svc] AS service,
  ['retail', 'fintech', 'marketplace', 'care'][svc] AS business_line, concat('s-', toString(req % 50000)) AS session_id,
  concat('u-', toString(req % 50000)) AS user_id,
  ['inventory_transfer', 'risk_interception', 'ranking', 'customer_service'][svc] AS decision_type,
  ['ingest', 'score', 'score', 'postprocess'][k + 1] AS stage, ['', 'cascade', 'fine', ''][k + 1] AS section,
  arrayStringConcat(arrayFilter(x -> x != '', [tenant, service, decision_type, stage, section]), ';') AS stack,
  if(k = 1, 'minilm', 'gpt-4o-mini') AS model,
  toUInt32(if(k IN (1, 2), 100 + cityHash64(number) % 900, 0)) AS input_tokens,
  toUInt32(if(k = 2, cityHash64(number, 1) % 100, 0)) AS cache_read_tokens, toUInt32(if(k = 2, 3, 0)) AS output_tokens,
  toUInt64(if(k IN (1, 2), 2000 + cityHash64(number, 2) % 2000, 0)) AS nominal_tokens, 8 AS candidates, 3 AS beam,
  0 AS iteration, toFloat32(cityHash64(number, 3) % 200) AS latency_ms, input_tokens * 1.5e-7 AS cost,
  if(k = 3, ['rules', 'cache_l1', 'cache_l2', 'coarse', 'fine', 'fine', 'llm', 'fallback'][cityHash64(req) % 8 + 1],
     'ok') AS outcome,
  ['transfer_order', 'payment_screened', 'search_session', 'ticket_resolved'][svc] AS business_event
FROM (SELECT number, intDiv(number, 4) AS req, toUInt8(number % 4) AS k, toUInt8(req % 4 + 1) AS svc,
             concat('r-', toString(req)) AS rid FROM numbers({offset:UInt64}, {n:UInt64})))
"""


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return round(min(times), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=1_000_000, help="rows per INSERT … SELECT")
    args = ap.parse_args()
    now = dt.datetime.now(dt.UTC)
    since = now - dt.timedelta(days=7)
    start_ms = int(since.timestamp() * 1000)
    step = 7 * 86400 * 1000 / max(1, args.rows // 4)
    with tempfile.TemporaryDirectory() as folder:
        client = clickhouse.open_migrated(f"chdb:///{folder}")
        started = time.perf_counter()
        for offset in range(0, args.rows, args.chunk):
            n = min(args.chunk, args.rows - offset)
            client.command(GENERATE, parameters={"start": start_ms, "step": step, "offset": offset, "n": n})
            print(f"generated {offset + n:,} / {args.rows:,} rows", file=sys.stderr)
        load_s = round(time.perf_counter() - started, 1)
        stored = client.query("SELECT count() FROM usage_events").result_rows[0][0]
        queries = {
            "request": lambda: levels.request_level(client, since),
            "session": lambda: levels.session_level(client, now),
            "service": lambda: levels.service_level(client, since),
            "business": lambda: levels.business_level(client, since),
        }
        seconds = {}
        for name, fn in queries.items():
            seconds[name] = best_of(args.repeat, fn)
            print(f"{name}: {seconds[name]} s", file=sys.stderr)
        extra = {
            "flamegraph": best_of(args.repeat, lambda: flamegraph.folded(client, since)),
            "alerts": best_of(1, lambda: alerts.evaluate_alerts(client, alerts.Thresholds(), now)),
            "totals": best_of(args.repeat, lambda: levels.totals(client, since)),
        }
    print(
        orjson.dumps(
            {
                "rows": stored,
                "load_s": load_s,
                "query_s": seconds,
                "other_s": extra,
                "max_query_s": max(seconds.values()),
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
