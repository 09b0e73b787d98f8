"""The four levels of usage (request, session, service, business) and the breakdowns reports draw.

Every function takes a clickhouse-connect client and returns plain JSON-able dicts and lists. Tokens are
actual tokens, input + output (OTel GenAI: input includes cache reads). The aggregates come from the
materialized views of migration 002; totals come from usage_events itself (exact: the sink inserts once).
"""

from __future__ import annotations

import datetime as dt

from streams.core.metrics import WASTE_SECTIONS
from streams.usage.drift import CLAIMING, drift

UTC = dt.UTC
BY_SOURCES = {  # --by: the aggregate that holds the dimension
    "service": ("usage_by_stack_hour", "service", "hour"),
    "decision_type": ("usage_by_stack_hour", "decision_type", "hour"),
    "session": ("usage_by_session_hour", "session_id", "hour"),
    "business_line": ("usage_by_business_day", "business_line", "day"),
}
BIG_MODEL_TIERS = ("fine", "llm")  # tiers that answered with the fine or escalation model; the rest is "small"


def rows(client, sql: str, params: dict | None = None, settings: dict | None = None) -> list[dict]:
    """Query rows as dicts. A column's own name wins over a same-named alias (`sum(tokens) AS tokens`)."""
    result = client.query(sql, parameters=params or {}, settings={"prefer_column_name_to_alias": 1, **(settings or {})})
    return [dict(zip(result.column_names, r)) for r in result.result_rows]


PRE_ANSWER = "position(request_id, '~l3~') > 0"  # an L3 pre-answer's id: <request it follows>~l3~<n>


def totals(client, since: dt.datetime) -> dict:
    """Totals over the window. `requests` are the upstream's; L3 pre-answers (speculative answers to likely
    follow-ups, under ids ending ~l3~N) are counted apart in `pre_answers`, their tokens in `pre_answer_tokens`
    (and in `tokens`: they were spent)."""
    r = rows(
        client,
        "SELECT toUInt64(sum(input_tokens + output_tokens)) AS tokens, sum(input_tokens) AS input_tokens, "
        "sum(cache_read_tokens) AS cache_read_tokens, sum(output_tokens) AS output_tokens, "
        "sum(nominal_tokens) AS nominal_tokens, round(sum(cost), 6) AS cost, count() AS events, "
        f"uniqExactIf(request_id, NOT {PRE_ANSWER}) AS requests, "
        f"uniqExactIf(request_id, {PRE_ANSWER}) AS pre_answers, "
        f"toUInt64(sumIf(input_tokens + output_tokens, {PRE_ANSWER})) AS pre_answer_tokens "
        "FROM usage_events WHERE ts >= {since:DateTime64(3)} AND stage != 'shadow'",
        {"since": since},
    )[0]
    r["saved_tokens"] = int(r["nominal_tokens"]) - int(r["tokens"])
    return r


def empty_reason(client, since: dt.datetime) -> str:
    """Why a window holds no usage, in words: nothing metered yet at all, or only before the window."""
    total, newest = rows(client, "SELECT count() AS n, max(ts) AS newest FROM usage_events")[0].values()
    if not total:
        return (
            "no usage has been metered yet: the usage table is empty (run `jev demo`, or start `jev worker "
            "stream` and send requests)"
        )
    return (
        f"no usage since {since.isoformat(timespec='seconds')}: the newest of {total:,} usage rows is from "
        f"{newest.isoformat(timespec='seconds')} (widen the window, e.g. --since all)"
    )


# one row per request in the window: FINAL merges a request's partial rows per day partition (7x faster than a
# GROUP BY over all partitions; a request whose events straddle midnight UTC counts once per day)
PER_REQUEST = (
    "SELECT service, decision_type, request_id, session_id, tier, first_ts AS started, "
    "toUInt64(input_tokens + output_tokens) AS tokens, nominal_tokens, cost, latency_ms "
    "FROM usage_by_request FINAL WHERE first_ts >= {since:DateTime64(3)} "
    f"AND NOT {PRE_ANSWER}"
)
BY_PARTITION = {"do_not_merge_across_partitions_select_final": 1}


def request_level(client, since: dt.datetime, limit: int = 10) -> dict:
    params = {"since": since}
    summary = rows(
        client,
        "SELECT count() AS requests, toUInt64(sum(tokens)) AS tokens, "
        "round(avg(tokens), 1) AS mean_tokens, "
        "quantiles(0.5, 0.95, 0.99)(tokens) AS q, round(sum(cost), 6) AS cost, "
        f"quantile(0.95)(latency_ms) AS latency_p95_ms FROM ({PER_REQUEST})",
        params,
        BY_PARTITION,
    )[0]
    q = summary.pop("q") or [0, 0, 0]
    summary["tokens_per_request"] = dict(zip(("p50", "p95", "p99"), (round(x, 1) for x in q)))
    summary["latency_p95_ms"] = round(summary["latency_p95_ms"] or 0.0, 1)
    summary["tokens_by_stage"] = {
        r["stage"]: int(r["tokens"])
        for r in rows(
            client,
            "SELECT stage, sum(input_tokens) + sum(output_tokens) AS tokens FROM usage_by_stack_hour "
            "WHERE hour >= toStartOfHour({since:DateTime64(3)}) GROUP BY stage ORDER BY stage",
            params,
        )
    }
    summary["top"] = [
        {**r, "started": r["started"].isoformat(), "cost": round(r["cost"], 6)}
        for r in rows(client, f"{PER_REQUEST} ORDER BY tokens DESC LIMIT {int(limit)}", params, BY_PARTITION)
    ]
    return summary


def session_level(client, now: dt.datetime, limit: int = 10) -> dict:
    """Rolling 24 hours (hour-aligned) per session."""
    params = {"since": now - dt.timedelta(hours=24)}
    per_session = (
        "SELECT tenant, session_id, any(user_id) AS user_id, uniqMerge(requests) AS requests, "
        "toUInt64(sum(input_tokens) + sum(output_tokens)) AS tokens, sum(nominal_tokens) AS nominal_tokens, "
        "sum(cost) AS cost FROM usage_by_session_hour "
        "WHERE hour >= toStartOfHour({since:DateTime64(3)}) GROUP BY tenant, session_id"
    )
    summary = rows(
        client,
        f"SELECT count() AS sessions, quantiles(0.5, 0.95)(tokens) AS q, max(tokens) AS max_tokens "
        f"FROM ({per_session})",
        params,
    )[0]
    q = summary.pop("q") or [0, 0]
    summary["tokens_per_session"] = {
        "p50": round(q[0], 1),
        "p95": round(q[1], 1),
        "max": int(summary.pop("max_tokens")),
    }
    summary["window_hours"] = 24
    summary["top"] = [
        {**r, "cost": round(r["cost"], 6)}
        for r in rows(client, per_session + f" ORDER BY tokens DESC LIMIT {int(limit)}", params)
    ]
    return summary


def service_level(client, since: dt.datetime) -> dict:
    """Tokens per request p50/p95/p99 per service and decision type: per hour, and over the window (one pass)."""
    found = rows(
        client,
        "SELECT service, decision_type, grouping(hour) = 1 AS overall, "
        "toStartOfHour(started) AS hour, "
        "count() AS requests, toUInt64(sum(tokens)) AS tokens, round(sum(cost), 6) AS cost, "
        "arrayMap(x -> round(x, 1), quantiles(0.5, 0.95, 0.99)(tokens)) AS q "
        f"FROM ({PER_REQUEST}) GROUP BY GROUPING SETS ((service, decision_type, hour), "
        "(service, decision_type)) ORDER BY overall DESC, hour, sum(tokens) DESC",
        {"since": since},
        BY_PARTITION,
    )
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
    stats = (
        "uniqMerge(requests) AS events, toUInt64(sum(input_tokens) + sum(output_tokens)) AS tokens, "
        "round(sum(cost), 6) AS cost, round(tokens / greatest(events, 1), 1) AS tokens_per_event, "
        "round(sum(cost) / greatest(events, 1), 8) AS cost_per_event, "
        "round(1000 * events / greatest(tokens, 1), 3) AS events_per_1k_tokens"
    )
    where = "WHERE day >= toDate({since:DateTime64(3)})"
    overall = rows(
        client,
        f"SELECT business_line, business_event, {stats} FROM usage_by_business_day {where} "
        "GROUP BY business_line, business_event ORDER BY tokens DESC",
        params,
    )
    weekly = rows(
        client,
        f"SELECT toMonday(day) AS week, business_line, business_event, {stats} "
        f"FROM usage_by_business_day {where} GROUP BY week, business_line, business_event "
        "ORDER BY week DESC, tokens_per_event ASC",
        params,
    )
    for r in weekly:
        r["week"] = r["week"].isoformat()
    return {"overall": overall, "weekly_leaderboard": weekly}


def breakdown(client, by: str, since: dt.datetime, limit: int = 20) -> list[dict]:
    """Tokens, nominal, savings and cost per value of `by` (service, decision_type, session, business_line)."""
    if by not in BY_SOURCES:
        raise ValueError(f"--by {by!r}: choose one of {', '.join(BY_SOURCES)}")
    table, column, time_col = BY_SOURCES[by]
    return [
        {**r, "saved_tokens": int(r["nominal_tokens"]) - int(r["tokens"]), "cost": round(r["cost"], 6)}
        for r in rows(
            client,
            f"SELECT {column} AS key, "
            "toUInt64(sum(input_tokens) + sum(output_tokens)) AS tokens, "
            f"sum(nominal_tokens) AS nominal_tokens, sum(cost) AS cost FROM {table} "
            f"WHERE {time_col} >= toStartOfHour({{since:DateTime64(3)}}) GROUP BY key "
            f"ORDER BY tokens DESC LIMIT {int(limit)}",
            {"since": since},
        )
    ]


BUCKETS_S = (60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400)  # time-chart buckets: a minute to a week
MAX_POINTS = 120


def bucket_for(span_s: float) -> int:
    """The smallest bucket that draws `span_s` seconds in at most MAX_POINTS points (minutes for a short window)."""
    return next((b for b in BUCKETS_S if span_s / b <= MAX_POINTS), BUCKETS_S[-1])


def tokens_over_time(client, since: dt.datetime, now: dt.datetime | None = None) -> dict:
    """{"bucket_s", "points": [{"t", "tokens", "nominal_tokens"}]}: actual and nominal tokens per bucket, the bucket
    chosen from the span of the window that holds data (a 20-minute demo is drawn by the minute)."""
    now = now or dt.datetime.now(UTC)
    first = rows(
        client,
        "SELECT min(minute) AS first FROM indices_by_minute WHERE minute >= toStartOfMinute({since:DateTime64(3)})",
        {"since": since},
    )[0]["first"]
    start = max(since, first.replace(tzinfo=UTC)) if first and first.year > 1970 else since
    bucket = bucket_for(max(60.0, (now - start).total_seconds()))
    points = rows(
        client,
        "SELECT toStartOfInterval(minute, INTERVAL {bucket:UInt32} SECOND) AS t, "
        "toUInt64(sum(tokens)) AS actual, toUInt64(sum(nominal_tokens)) AS nominal "
        "FROM indices_by_minute WHERE minute >= toStartOfMinute({since:DateTime64(3)}) "
        "GROUP BY t ORDER BY t",
        {"since": since, "bucket": bucket},
    )
    return {
        "bucket_s": bucket,
        "points": [
            {"t": r["t"].isoformat(), "tokens": int(r["actual"]), "nominal_tokens": int(r["nominal"])} for r in points
        ],
    }


# What a mechanism whose actual tokens exceed its nominal share is doing (see streams/scoring/ledger.py)
NEGATIVE_SAVING = {
    "score;fine": "the fine model reads each kept candidate with the context in its own tokenizer (special tokens "
    "per pair included), which counts more than the request model's tokens that nominal is measured "
    "in; the context it does not re-send per candidate is credited to score;shared_context",
    "score;state_cache": "cache reads count as input tokens (OTel: input includes cache reads), in the fine model's "
    "tokenizer against their share of nominal in the request model's; they are billed at the "
    "cache-read price, so cost falls where tokens do not",
    "score;escalation": "the escalation model re-ranks low-confidence decisions: spending beyond the naive baseline "
    "by design (its nominal is 0)",
    "score;coarse": "the coarse model scored every candidate before the fine tier: the price of pruning",
    "postprocess;retry": "a second generation for an answer under min_output_tokens, which the naive path never asks",
    "distill;provenance": "the markers that say what distill kept or folded cost tokens the raw history did not have",
}


def savings_by_mechanism(client, since: dt.datetime) -> list[dict]:
    """Nominal vs actual per stage and section: the saving each mechanism made. A mechanism that neither spent nor
    stood for any tokens is left out; one that spent more than its nominal share carries a `note` saying why."""
    out = []
    for r in rows(
        client,
        "SELECT stage, section, toUInt64(sum(input_tokens) + sum(output_tokens)) AS tokens, "
        "sum(nominal_tokens) AS nominal_tokens FROM usage_by_stack_hour "
        "WHERE hour >= toStartOfHour({since:DateTime64(3)}) GROUP BY stage, section "
        "HAVING sum(input_tokens) + sum(output_tokens) > 0 OR sum(nominal_tokens) > 0 "
        "ORDER BY sum(nominal_tokens) - tokens DESC",
        {"since": since},
    ):
        row = {**r, "saved_tokens": int(r["nominal_tokens"]) - int(r["tokens"])}
        if row["saved_tokens"] < 0:
            mechanism = f"{r['stage']};{r['section']}".rstrip(";")
            row["note"] = NEGATIVE_SAVING.get(
                mechanism,
                f"{mechanism} spent {-row['saved_tokens']:,} tokens more than the naive baseline attributes to it",
            )
        out.append(row)
    return out


def by_model(client, since: dt.datetime) -> dict[str, dict]:
    """Per model: its calls (usage rows with model tokens, less the state_cache rows split off them), Jev's count
    of its tokens, the server's count of the calls it reported usage for, their drift over those calls (server /
    Jev − 1), and the cost, priced on the server's count where there is one. The prompt tokens the server says its
    prefix cache served (cached_tokens); of its decide calls', those Jev claimed it would serve (cached_claimed: its
    shared_context and state_cache savings) beside those it confirmed (cached_confirmed), and their drift
    (cached_drift, streams/usage/drift.py). A model whose calls reported none (in-process models; a server that
    sends no usage when streaming) has no server count: None."""
    out = {}
    for r in rows(
        client,
        "SELECT model, countIf(section != 'state_cache') AS calls, "
        "toUInt64(sum(input_tokens + output_tokens)) AS tokens_jev, "
        "toUInt64(sumIf(server_input_tokens + server_output_tokens, count_source = 'server')) "
        "AS server_tokens, toUInt64(sumIf(server_cache_read_tokens, count_source = 'server')) AS server_cached, "
        "toUInt64(sumIf(input_tokens + output_tokens, count_source = 'server')) AS jev_of_served, "
        f"toUInt64(sumIf(cache_read_tokens, count_source = 'server' AND {CLAIMING})) AS claimed_of_served, "
        f"toUInt64(sumIf(server_cache_read_tokens, count_source = 'server' AND {CLAIMING})) AS confirmed, "
        "countIf(count_source = 'server') AS served, round(sum(cost), 6) AS cost "
        "FROM usage_events WHERE ts >= {since:DateTime64(3)} AND stage != 'shadow' AND model != '' "
        "AND input_tokens + output_tokens > 0 GROUP BY model ORDER BY tokens_jev DESC",
        {"since": since},
    ):
        served = bool(r["served"])
        out[r["model"]] = {
            "calls": r["calls"],
            "tokens_jev": r["tokens_jev"],
            "tokens_server": r["server_tokens"] if served else None,
            "drift": drift(r["jev_of_served"], r["server_tokens"]) if served else None,
            "cached_claimed": r["claimed_of_served"] if served else None,
            "cached_tokens": r["server_cached"] if served else None,
            "cached_confirmed": r["confirmed"] if served else None,
            "cached_drift": drift(r["claimed_of_served"], r["confirmed"]) if served else None,
            "cost": r["cost"],
        }
    return out


def tier_shares(client, since: dt.datetime) -> dict[str, float]:
    counts = rows(
        client,
        f"SELECT tier, count() AS n FROM ({PER_REQUEST}) WHERE tier != '' GROUP BY tier ORDER BY n DESC",
        {"since": since},
        BY_PARTITION,
    )
    total = sum(r["n"] for r in counts) or 1
    return {r["tier"]: round(r["n"] / total, 4) for r in counts}


def efficiency(client, since: dt.datetime) -> dict:
    """token_efficiency = effective / total tokens (effective: not spent on fallbacks or output repair);
    cache_miss_rate = share of decisions not answered by a cache; small_model_share = share of decisions
    answered without the fine/escalation model."""
    r = rows(
        client,
        "SELECT sum(input_tokens + output_tokens) AS total, sumIf(input_tokens + output_tokens, "
        "outcome != 'fallback' AND NOT (stage = 'postprocess' AND has({waste:Array(String)}, section))) "
        "AS effective FROM usage_by_stack_hour WHERE hour >= toStartOfHour({since:DateTime64(3)})",
        {"since": since, "waste": list(WASTE_SECTIONS)},
    )[0]
    shares = tier_shares(client, since)
    return {
        "token_efficiency": round(r["effective"] / r["total"], 4) if r["total"] else 1.0,
        "cache_miss_rate": round(1 - sum(v for k, v in shares.items() if k.startswith("cache")), 4),
        "small_model_share": round(sum(v for k, v in shares.items() if k not in BIG_MODEL_TIERS), 4),
    }


INDEX_SQL = (
    "SELECT sum(tokens) AS tokens_spent, sum(effective_tokens) AS effective, sum(decisions) AS decided, "
    "sum(model_decisions) AS model_decided, sum(top_tier_decisions) AS top_tier, "
    "sum(pre_answers) AS pre_answered, sum(prompt_bytes) AS sent_bytes, sum(compact_bytes) AS compact "
    "FROM indices_by_minute WHERE minute >= toStartOfMinute({since:DateTime64(3)})"
)


def index_ranges(settings=None) -> dict[str, tuple[float | None, float | None]]:
    """Each index's healthy range (low, high; None = open), from the settings (JEV_INDEX_*: seed 004's values)."""
    if settings is None:
        from streams import settings as settings_mod

        settings = settings_mod.load()
    s = settings
    return {
        "te": (s.index_te_min, None),
        "cp": (None, s.index_cp_max),
        "hr": (s.index_hr_min, s.index_hr_max),
        "pe": (None, s.index_pe_max),
        "mu": (s.index_mu_min, s.index_mu_max),
    }


def index_values(client, since: dt.datetime) -> dict:
    """TE, CP, HR and PE over the window from the indices_by_minute view (None where the window has no data),
    with the counts behind them. L3 pre-answers are counted apart: they are no decisions."""
    r = rows(client, INDEX_SQL, {"since": since})[0]
    ratio = lambda a, b: round(a / b, 4) if b else None  # noqa: E731
    return {
        "te": ratio(r["effective"], r["tokens_spent"]),
        "cp": ratio(r["model_decided"], r["decided"]),
        "hr": None if not r["decided"] else round(1 - r["top_tier"] / r["decided"], 4),
        "pe": ratio(r["sent_bytes"], r["compact"]),
        "decisions": int(r["decided"]),
        "pre_answers": int(r["pre_answered"]),
    }


def indices(client, since: dt.datetime, settings=None) -> dict:
    """{"te": {"value", "healthy", "status"}, "cp": ..., "hr": ..., "pe": ...}: each index, its healthy range and
    whether the window is in it ("ok", "low", "high" or "no data")."""
    values = index_values(client, since)
    out = {}
    for key, (low, high) in index_ranges(settings).items():
        if key not in values:
            continue  # MU is a Prometheus gauge of GPU scoring workers, not usage
        value = values[key]
        status = (
            "no data"
            if value is None
            else "low"
            if low is not None and value < low
            else "high"
            if high is not None and value > high
            else "ok"
        )
        out[key] = {"value": value, "healthy": [low, high], "status": status}
    return out


def four_levels(client, since: dt.datetime, now: dt.datetime) -> dict:
    return {
        "request": request_level(client, since),
        "session": session_level(client, now),
        "service": service_level(client, since),
        "business": business_level(client, since),
    }
