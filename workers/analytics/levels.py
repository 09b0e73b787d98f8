"""The four levels of usage (request, session, service, business) and the breakdowns reports draw.

Every function takes a clickhouse-connect client and returns plain JSON-able dicts and lists. Tokens are
actual tokens, input + output (OTel GenAI: input includes cache reads). The aggregates come from the
materialized views of migration 002; totals come from usage_events itself (exact: the sink inserts once).
"""
from __future__ import annotations

import datetime as dt

UTC = dt.timezone.utc
BY_SOURCES = {  # --by: the aggregate that holds the dimension
    "service": ("usage_by_stack_hour", "service", "hour"),
    "decision_type": ("usage_by_stack_hour", "decision_type", "hour"),
    "session": ("usage_by_session_hour", "session_id", "hour"),
    "business_line": ("usage_by_business_day", "business_line", "day"),
}
BIG_MODEL_TIERS = ("fine", "llm")  # tiers that answered with the fine or escalation model; the rest is "small"
WASTE_SECTIONS = ("retry", "cleanup")  # postprocess sections: tokens spent repairing output, not deciding


def rows(client, sql: str, params: dict | None = None, settings: dict | None = None) -> list[dict]:
    """Query rows as dicts. A column's own name wins over a same-named alias (`sum(tokens) AS tokens`)."""
    result = client.query(sql, parameters=params or {}, settings={"prefer_column_name_to_alias": 1, **(settings or {})})
    return [dict(zip(result.column_names, r)) for r in result.result_rows]


def totals(client, since: dt.datetime) -> dict:
    r = rows(client, "SELECT toUInt64(sum(input_tokens + output_tokens)) AS tokens, sum(input_tokens) AS input_tokens, "
                     "sum(cache_read_tokens) AS cache_read_tokens, sum(output_tokens) AS output_tokens, "
                     "sum(nominal_tokens) AS nominal_tokens, round(sum(cost), 6) AS cost, count() AS events, "
                     "uniqExact(request_id) AS requests FROM usage_events WHERE ts >= {since:DateTime64(3)} "
                     "AND stage != 'shadow'",
             {"since": since})[0]
    r["saved_tokens"] = int(r["nominal_tokens"]) - int(r["tokens"])
    return r


# one row per request in the window: FINAL merges a request's partial rows per day partition (7x faster than a
# GROUP BY over all partitions; a request whose events straddle midnight UTC counts once per day)
PER_REQUEST = ("SELECT service, decision_type, request_id, session_id, tier, first_ts AS started, "
               "toUInt64(input_tokens + output_tokens) AS tokens, nominal_tokens, cost, latency_ms "
               "FROM usage_by_request FINAL WHERE first_ts >= {since:DateTime64(3)}")
BY_PARTITION = {"do_not_merge_across_partitions_select_final": 1}


def request_level(client, since: dt.datetime, limit: int = 10) -> dict:
    params = {"since": since}
    summary = rows(client, "SELECT count() AS requests, toUInt64(sum(tokens)) AS tokens, "
                           "round(avg(tokens), 1) AS mean_tokens, "
                           "quantiles(0.5, 0.95, 0.99)(tokens) AS q, round(sum(cost), 6) AS cost, "
                           f"quantile(0.95)(latency_ms) AS latency_p95_ms FROM ({PER_REQUEST})",
                   params, BY_PARTITION)[0]
    q = summary.pop("q") or [0, 0, 0]
    summary["tokens_per_request"] = dict(zip(("p50", "p95", "p99"), (round(x, 1) for x in q)))
    summary["latency_p95_ms"] = round(summary["latency_p95_ms"] or 0.0, 1)
    summary["tokens_by_stage"] = {r["stage"]: int(r["tokens"]) for r in rows(
        client, "SELECT stage, sum(input_tokens) + sum(output_tokens) AS tokens FROM usage_by_stack_hour "
                "WHERE hour >= toStartOfHour({since:DateTime64(3)}) GROUP BY stage ORDER BY stage", params)}
    summary["top"] = [{**r, "started": r["started"].isoformat(), "cost": round(r["cost"], 6)}
                      for r in rows(client, f"{PER_REQUEST} ORDER BY tokens DESC LIMIT {int(limit)}", params,
                                    BY_PARTITION)]
    return summary


def session_level(client, now: dt.datetime, limit: int = 10) -> dict:
    """Rolling 24 hours (hour-aligned) per session."""
    params = {"since": now - dt.timedelta(hours=24)}
    per_session = ("SELECT tenant, session_id, any(user_id) AS user_id, uniqMerge(requests) AS requests, "
                   "toUInt64(sum(input_tokens) + sum(output_tokens)) AS tokens, sum(nominal_tokens) AS nominal_tokens, "
                   "sum(cost) AS cost FROM usage_by_session_hour "
                   "WHERE hour >= toStartOfHour({since:DateTime64(3)}) GROUP BY tenant, session_id")
    summary = rows(client, f"SELECT count() AS sessions, quantiles(0.5, 0.95)(tokens) AS q, max(tokens) AS max_tokens "
                           f"FROM ({per_session})", params)[0]
    q = summary.pop("q") or [0, 0]
    summary["tokens_per_session"] = {"p50": round(q[0], 1), "p95": round(q[1], 1),
                                     "max": int(summary.pop("max_tokens"))}
    summary["window_hours"] = 24
    summary["top"] = [{**r, "cost": round(r["cost"], 6)}
                      for r in rows(client, per_session + f" ORDER BY tokens DESC LIMIT {int(limit)}", params)]
    return summary


def service_level(client, since: dt.datetime) -> dict:
    """Tokens per request p50/p95/p99 per service and decision type: per hour, and over the window (one pass)."""
    found = rows(client, "SELECT service, decision_type, grouping(hour) = 1 AS overall, "
                         "toStartOfHour(started) AS hour, "
                         "count() AS requests, toUInt64(sum(tokens)) AS tokens, round(sum(cost), 6) AS cost, "
                         "arrayMap(x -> round(x, 1), quantiles(0.5, 0.95, 0.99)(tokens)) AS q "
                         f"FROM ({PER_REQUEST}) GROUP BY GROUPING SETS ((service, decision_type, hour), "
                         "(service, decision_type)) ORDER BY overall DESC, hour, sum(tokens) DESC",
                 {"since": since}, BY_PARTITION)
    out: dict[str, list] = {"overall": [], "hourly": []}
    for r in found:
        p50, p95, p99 = r.pop("q")
        overall, hour = r.pop("overall"), r.pop("hour")
        row = {**r, "p50": p50, "p95": p95, "p99": p99}
        out["overall" if overall else "hourly"].append(row if overall else {**row, "hour": hour.isoformat()})
    return out


def business_level(client, since: dt.datetime) -> dict:
    """Tokens and cost per business event, over the window and as a weekly leaderboard (fewest tokens first)."""
    params = {"since": since}
    stats = ("uniqMerge(requests) AS events, toUInt64(sum(input_tokens) + sum(output_tokens)) AS tokens, "
             "round(sum(cost), 6) AS cost, round(tokens / greatest(events, 1), 1) AS tokens_per_event, "
             "round(sum(cost) / greatest(events, 1), 8) AS cost_per_event, "
             "round(1000 * events / greatest(tokens, 1), 3) AS events_per_1k_tokens")
    where = "WHERE day >= toDate({since:DateTime64(3)})"
    overall = rows(client, f"SELECT business_line, business_event, {stats} FROM usage_by_business_day {where} "
                           "GROUP BY business_line, business_event ORDER BY tokens DESC", params)
    weekly = rows(client, f"SELECT toMonday(day) AS week, business_line, business_event, {stats} "
                          f"FROM usage_by_business_day {where} GROUP BY week, business_line, business_event "
                          "ORDER BY week DESC, tokens_per_event ASC", params)
    for r in weekly:
        r["week"] = r["week"].isoformat()
    return {"overall": overall, "weekly_leaderboard": weekly}


def breakdown(client, by: str, since: dt.datetime, limit: int = 20) -> list[dict]:
    """Tokens, nominal, savings and cost per value of `by` (service, decision_type, session, business_line)."""
    if by not in BY_SOURCES:
        raise ValueError(f"--by {by!r}: choose one of {', '.join(BY_SOURCES)}")
    table, column, time_col = BY_SOURCES[by]
    return [{**r, "saved_tokens": int(r["nominal_tokens"]) - int(r["tokens"]), "cost": round(r["cost"], 6)}
            for r in rows(client, f"SELECT {column} AS key, "
                                  "toUInt64(sum(input_tokens) + sum(output_tokens)) AS tokens, "
                                  f"sum(nominal_tokens) AS nominal_tokens, sum(cost) AS cost FROM {table} "
                                  f"WHERE {time_col} >= toStartOfHour({{since:DateTime64(3)}}) GROUP BY key "
                                  f"ORDER BY tokens DESC LIMIT {int(limit)}", {"since": since})]


def tokens_over_time(client, since: dt.datetime) -> list[dict]:
    return [{"hour": r["hour"].isoformat(), "tokens": int(r["tokens"]), "nominal_tokens": int(r["nominal_tokens"])}
            for r in rows(client, "SELECT hour, sum(input_tokens) + sum(output_tokens) AS tokens, "
                                  "sum(nominal_tokens) AS nominal_tokens FROM usage_by_stack_hour "
                                  "WHERE hour >= toStartOfHour({since:DateTime64(3)}) GROUP BY hour ORDER BY hour",
                          {"since": since})]


def savings_by_mechanism(client, since: dt.datetime) -> list[dict]:
    """Nominal vs actual per stage and section: the saving each mechanism made."""
    return [{**r, "saved_tokens": int(r["nominal_tokens"]) - int(r["tokens"])}
            for r in rows(client, "SELECT stage, section, toUInt64(sum(input_tokens) + sum(output_tokens)) AS tokens, "
                                  "sum(nominal_tokens) AS nominal_tokens FROM usage_by_stack_hour "
                                  "WHERE hour >= toStartOfHour({since:DateTime64(3)}) GROUP BY stage, section "
                                  "ORDER BY sum(nominal_tokens) - tokens DESC", {"since": since})]


def tier_shares(client, since: dt.datetime) -> dict[str, float]:
    counts = rows(client, f"SELECT tier, count() AS n FROM ({PER_REQUEST}) WHERE tier != '' GROUP BY tier "
                          "ORDER BY n DESC", {"since": since}, BY_PARTITION)
    total = sum(r["n"] for r in counts) or 1
    return {r["tier"]: round(r["n"] / total, 4) for r in counts}


def efficiency(client, since: dt.datetime) -> dict:
    """token_efficiency = effective / total tokens (effective: not spent on fallbacks or output repair);
    cache_miss_rate = share of decisions not answered by a cache; small_model_share = share of decisions
    answered without the fine/escalation model."""
    r = rows(client, "SELECT sum(input_tokens + output_tokens) AS total, sumIf(input_tokens + output_tokens, "
                     "outcome != 'fallback' AND NOT (stage = 'postprocess' AND has({waste:Array(String)}, section))) "
                     "AS effective FROM usage_by_stack_hour WHERE hour >= toStartOfHour({since:DateTime64(3)})",
             {"since": since, "waste": list(WASTE_SECTIONS)})[0]
    shares = tier_shares(client, since)
    return {"token_efficiency": round(r["effective"] / r["total"], 4) if r["total"] else 1.0,
            "cache_miss_rate": round(1 - sum(v for k, v in shares.items() if k.startswith("cache")), 4),
            "small_model_share": round(sum(v for k, v in shares.items() if k not in BIG_MODEL_TIERS), 4)}


def four_levels(client, since: dt.datetime, now: dt.datetime) -> dict:
    return {"request": request_level(client, since), "session": session_level(client, now),
            "service": service_level(client, since), "business": business_level(client, since)}
