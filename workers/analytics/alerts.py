"""Alerts computed from the four-level aggregates: each says what, where, how much, and the SQL to look closer.

evaluate_alerts(client, thresholds, now) → [schemas.records.Alert]; whoever runs it publishes them
(`jev alerts --publish` to the alerts topic, `--webhook URL` as a JSON POST).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import urllib.request

import orjson

from schemas.records import Alert
from streams.usage import drift
from workers.analytics.levels import BY_PARTITION, by_model, index_values, rows

PER_REQUEST = (
    "SELECT service, decision_type, first_ts AS t, tier, input_tokens + output_tokens AS tokens "
    "FROM usage_by_request FINAL WHERE first_ts >= {since:DateTime64(3)}"
)


@dataclasses.dataclass(frozen=True)
class Thresholds:
    p95_drift: float = 0.20  # service p95 tokens/request vs its 7-day baseline, ± this share
    session_tokens_24h: int = 5000
    budget_ratio: float = 1.20  # a decision type over this share of its daily budget
    daily_budgets: dict = dataclasses.field(default_factory=dict)  # decision_type → tokens per day
    tail_spike_ratio: float = 1.5  # last hour's p99 / p99.9 over the 7-day value
    fallback_rate: float = 0.05
    count_drift: float = drift.TOLERANCE  # a model server's counts against Jev's over 15 minutes, ± this share
    efficiency_falling_days: int = 3  # business events per 1,000 tokens falling this many days in a row
    min_requests: int = 20  # fewer requests than this in a window: no percentile or rate alert
    te_alert: float = 0.75  # the efficiency indices over the last 15 minutes (seed 004; JEV_INDEX_* settings)
    cp_alert: float = 0.25
    pe_max: float = 1.8
    hr_min: float = 0.60
    hr_max: float = 0.85

    @classmethod
    def from_settings(cls, settings) -> Thresholds:
        return cls(
            te_alert=settings.index_te_alert,
            cp_alert=settings.index_cp_alert,
            pe_max=settings.index_pe_max,
            hr_min=settings.index_hr_min,
            hr_max=settings.index_hr_max,
        )

    def replace(self, **changes) -> Thresholds:
        return dataclasses.replace(self, **changes)


def _lit(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _alert(
    rule: str, severity: str, scope: str, message: str, value: float, threshold: float, query: str, now: dt.datetime
) -> Alert:
    return Alert(
        rule=rule,
        severity=severity,
        scope=scope,
        message=message,
        value=round(float(value), 4),
        threshold=round(float(threshold), 4),
        query=query,
        ts=now.timestamp(),
    )


def p95_drift(client, t: Thresholds, now: dt.datetime) -> list[Alert]:
    found = rows(
        client,
        f"SELECT service, decision_type, countIf(t >= {{day:DateTime64(3)}}) AS n_now, "
        "countIf(t < {day:DateTime64(3)}) AS n_base, "
        "quantileIf(0.95)(tokens, t >= {day:DateTime64(3)}) AS p95_now, "
        "quantileIf(0.95)(tokens, t < {day:DateTime64(3)}) AS p95_base "
        f"FROM ({PER_REQUEST}) GROUP BY service, decision_type",
        {"since": now - dt.timedelta(days=8), "day": now - dt.timedelta(days=1)},
        BY_PARTITION,
    )
    out = []
    for r in found:
        if min(r["n_now"], r["n_base"]) < t.min_requests or not r["p95_base"]:
            continue
        drift = r["p95_now"] / r["p95_base"] - 1
        if abs(drift) > t.p95_drift:
            where = f"service={r['service']} decision_type={r['decision_type']}"
            out.append(
                _alert(
                    "p95_tokens_drift",
                    "warning",
                    where,
                    f"p95 tokens/request {r['p95_now']:.0f} in the last 24 h vs {r['p95_base']:.0f} "
                    f"over the 7 days before ({drift:+.0%}) for {where}",
                    drift,
                    t.p95_drift,
                    f"SELECT toStartOfHour(first_ts) AS hour, quantile(0.95)(input_tokens + output_tokens) "
                    f"FROM usage_by_request FINAL WHERE service = {_lit(r['service'])} AND decision_type = "
                    f"{_lit(r['decision_type'])} AND first_ts >= now() - INTERVAL 8 DAY "
                    f"GROUP BY hour ORDER BY hour",
                    now,
                )
            )
    return out


def session_tokens(client, t: Thresholds, now: dt.datetime) -> list[Alert]:
    found = rows(
        client,
        "SELECT tenant, session_id, any(user_id) AS user_id, "
        "sum(input_tokens) + sum(output_tokens) AS tokens FROM usage_by_session_hour "
        "WHERE hour >= toStartOfHour({since:DateTime64(3)}) GROUP BY tenant, session_id "
        "HAVING tokens > {limit:UInt64} ORDER BY tokens DESC LIMIT 100",
        {"since": now - dt.timedelta(hours=24), "limit": t.session_tokens_24h},
    )
    return [
        _alert(
            "session_tokens_24h",
            "warning",
            f"tenant={r['tenant']} session={r['session_id']}",
            f"session {r['session_id']} (user {r['user_id']}) spent {r['tokens']:,} tokens in 24 h "
            f"(limit {t.session_tokens_24h:,})",
            r["tokens"],
            t.session_tokens_24h,
            f"SELECT ts, request_id, stage, stack, input_tokens, output_tokens FROM usage_events "
            f"WHERE session_id = {_lit(r['session_id'])} AND ts >= now() - INTERVAL 24 HOUR ORDER BY ts",
            now,
        )
        for r in found
    ]


def daily_budget(client, t: Thresholds, now: dt.datetime) -> list[Alert]:
    if not t.daily_budgets:
        return []
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    spent = {
        r["decision_type"]: r["tokens"]
        for r in rows(
            client,
            "SELECT decision_type, sum(input_tokens) + sum(output_tokens) AS tokens FROM usage_by_stack_hour "
            "WHERE hour >= {day:DateTime64(3)} GROUP BY decision_type",
            {"day": day},
        )
    }
    out = []
    for dtype, budget in sorted(t.daily_budgets.items()):
        used = spent.get(dtype, 0) / budget if budget else 0.0
        if used > t.budget_ratio:
            out.append(
                _alert(
                    "daily_budget",
                    "critical",
                    f"decision_type={dtype}",
                    f"{dtype} spent {spent[dtype]:,} tokens today, {used:.0%} of its daily budget {budget:,}",
                    used,
                    t.budget_ratio,
                    f"SELECT service, stage, section, sum(input_tokens + output_tokens) AS tokens FROM "
                    f"usage_events WHERE decision_type = {_lit(dtype)} AND ts >= today() "
                    f"GROUP BY service, stage, section ORDER BY tokens DESC",
                    now,
                )
            )
    return out


def tail_spike(client, t: Thresholds, now: dt.datetime) -> list[Alert]:
    found = rows(
        client,
        "SELECT decision_type, countIf(t >= {hour:DateTime64(3)}) AS n_now, "
        "quantilesIf(0.99, 0.999)(tokens, t >= {hour:DateTime64(3)}) AS q_now, "
        "quantilesIf(0.99, 0.999)(tokens, t < {hour:DateTime64(3)}) AS q_base, "
        "countIf(t < {hour:DateTime64(3)}) AS n_base "
        f"FROM ({PER_REQUEST}) GROUP BY decision_type",
        {"since": now - dt.timedelta(days=7), "hour": now - dt.timedelta(hours=1)},
        BY_PARTITION,
    )
    out = []
    for r in found:
        if min(r["n_now"], r["n_base"]) < t.min_requests:
            continue
        for name, cur, base in zip(("p99", "p99.9"), r["q_now"], r["q_base"]):
            if base and cur / base > t.tail_spike_ratio:
                out.append(
                    _alert(
                        f"{name.replace('.', '_')}_spike",
                        "warning",
                        f"decision_type={r['decision_type']}",
                        f"{name} tokens/request of {r['decision_type']} is {cur:.0f} in the last hour, "
                        f"{cur / base:.1f}x its 7-day {name} {base:.0f}",
                        cur / base,
                        t.tail_spike_ratio,
                        f"SELECT request_id, session_id, input_tokens + output_tokens AS tokens, "
                        f"tokens_by_stage FROM usage_by_request FINAL WHERE decision_type = "
                        f"{_lit(r['decision_type'])} AND first_ts >= now() - INTERVAL 1 HOUR "
                        f"ORDER BY tokens DESC LIMIT 20",
                        now,
                    )
                )
    return out


def fallback_rate(client, t: Thresholds, now: dt.datetime) -> list[Alert]:
    found = rows(
        client,
        "SELECT decision_type, countIf(tier != '') AS decided, "
        "countIf(tier = 'fallback') AS fallbacks "
        f"FROM ({PER_REQUEST}) GROUP BY decision_type",
        {"since": now - dt.timedelta(hours=24)},
        BY_PARTITION,
    )
    out = []
    for r in found:
        rate = r["fallbacks"] / r["decided"] if r["decided"] else 0.0
        if r["decided"] >= t.min_requests and rate > t.fallback_rate:
            out.append(
                _alert(
                    "fallback_rate",
                    "critical",
                    f"decision_type={r['decision_type']}",
                    f"{rate:.1%} of {r['decision_type']} decisions fell back in 24 h "
                    f"({r['fallbacks']} of {r['decided']})",
                    rate,
                    t.fallback_rate,
                    f"SELECT stack, count() FROM usage_events WHERE decision_type = "
                    f"{_lit(r['decision_type'])} AND outcome = 'fallback' AND ts >= now() - INTERVAL 24 HOUR "
                    f"GROUP BY stack",
                    now,
                )
            )
    return out


# Each drift by_model reports: (its key, the rule's name, what it says is off)
DRIFTS = (
    ("drift", "token_count_drift", "the server's count of its tokens is {:+.1%} off Jev's"),
    (
        "cached_drift",
        "cache_read_drift",
        "its server's prefix cache served {:+.1%} off the prompt tokens Jev claimed it would (its shared_context "
        "and state_cache savings)",
    ),
)


def count_drift(client, t: Thresholds, now: dt.datetime) -> list[Alert]:
    """Each model's two counts over the last 15 minutes (levels.by_model): its tokens, Jev's against the server's,
    and its decide calls' cache reads, claimed against confirmed; as JevTokenCountDrift and JevCacheReadDrift do
    from the workers' metrics."""
    out = []
    for model, r in by_model(client, now - dt.timedelta(minutes=15)).items():
        for key, rule, what in DRIFTS:
            if r["calls"] >= t.min_requests and drift.beyond(r[key], t.count_drift):
                out.append(
                    _alert(
                        rule,
                        "warning",
                        f"model={model}",
                        f"{model}: {what.format(r[key])} over the last 15 minutes",
                        r[key],
                        t.count_drift,
                        "SELECT section, count_source, sum(input_tokens + output_tokens) AS jev, "
                        "sum(server_input_tokens + server_output_tokens) AS server, sum(cache_read_tokens) AS "
                        "claimed, sum(server_cache_read_tokens) AS confirmed FROM usage_events WHERE model = "
                        f"{_lit(model)} AND ts >= now() - INTERVAL 15 MINUTE GROUP BY section, count_source",
                        now,
                    )
                )
    return out


def business_efficiency(client, t: Thresholds, now: dt.datetime) -> list[Alert]:
    days = t.efficiency_falling_days
    found = rows(
        client,
        "SELECT business_line, business_event, day, "
        "1000 * uniqMerge(requests) / greatest(sum(input_tokens) + sum(output_tokens), 1) AS eff "
        "FROM usage_by_business_day WHERE day >= toDate({since:DateTime64(3)}) "
        "GROUP BY business_line, business_event, day ORDER BY business_line, business_event, day",
        {"since": now - dt.timedelta(days=days)},
    )
    series: dict[tuple[str, str], list[tuple[dt.date, float]]] = {}
    for r in found:
        series.setdefault((r["business_line"], r["business_event"]), []).append((r["day"], r["eff"]))
    out = []
    for (line, event), points in series.items():
        values = [v for _, v in points]
        if len(values) == days + 1 and all(b < a for a, b in zip(values, values[1:])):
            out.append(
                _alert(
                    "business_efficiency_falling",
                    "warning",
                    f"business_line={line} event={event}",
                    f"{event} per 1,000 tokens fell {days} days in a row: " + " → ".join(f"{v:.2f}" for v in values),
                    values[-1],
                    values[0],
                    f"SELECT day, uniqMerge(requests) AS events, sum(input_tokens) + sum(output_tokens) AS "
                    f"tokens FROM usage_by_business_day WHERE business_line = {_lit(line)} AND "
                    f"business_event = {_lit(event)} GROUP BY day ORDER BY day",
                    now,
                )
            )
    return out


def efficiency_indices(client, t: Thresholds, now: dt.datetime) -> list[Alert]:
    """TE, CP, HR and PE over the last 15 minutes against their alert thresholds (CP and HR need min_requests
    decisions in the window)."""
    v = index_values(client, now - dt.timedelta(minutes=15))
    query = "SELECT * FROM efficiency_indices(since = toUInt32(now()) - 900)"
    checks = [
        (
            "te",
            "token_efficiency_low",
            v["te"],
            v["te"] is not None and v["te"] < t.te_alert,
            t.te_alert,
            "of tokens went to decisions (not fallbacks or output repair)",
        ),
        (
            "cp",
            "cache_penetration_high",
            v["cp"],
            v["decisions"] >= t.min_requests and v["cp"] > t.cp_alert,
            t.cp_alert,
            "of decisions went past every cache and rule to a model tier",
        ),
        (
            "hr",
            "hybrid_routing_out_of_range",
            v["hr"],
            v["decisions"] >= t.min_requests and not t.hr_min <= v["hr"] <= t.hr_max,
            t.hr_min if (v["hr"] or 0) < t.hr_min else t.hr_max,
            "of decisions were answered below the fine/escalation model",
        ),
        (
            "pe",
            "protocol_expansion_high",
            v["pe"],
            v["pe"] is not None and v["pe"] > t.pe_max,
            t.pe_max,
            "bytes of prompt per byte of compact request",
        ),
    ]
    return [
        _alert(
            rule,
            "warning",
            f"index={key}",
            f"{key.upper()} {value:.2f} over the last 15 minutes: {value:.0%} {what}"
            if key != "pe"
            else f"PE {value:.2f} over the last 15 minutes: {value:.2f} {what} (healthy under {threshold})",
            value,
            threshold,
            query,
            now,
        )
        for key, rule, value, fired, threshold, what in checks
        if fired
    ]


RULES = (
    p95_drift,
    session_tokens,
    daily_budget,
    tail_spike,
    fallback_rate,
    count_drift,
    business_efficiency,
    efficiency_indices,
)


def evaluate_alerts(client, thresholds: Thresholds, now: dt.datetime) -> list[Alert]:
    return [alert for rule in RULES for alert in rule(client, thresholds, now)]


def post_webhook(url: str, alerts: list[Alert], timeout: float = 5.0) -> int:
    """POST {"alerts": [...]} as JSON; returns the HTTP status."""
    body = orjson.dumps({"alerts": [a.asdict() for a in alerts]})
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status
