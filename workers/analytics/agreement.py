"""Agreement beside savings: per saving mechanism, the tokens it saved and the share of shadow verdicts it
kept, with the Wilson lower bound the guard compares with the mechanism's floor.

It reads the tables (shadow_verdicts, usage_events) from the window's exact start, not migration 005's views that
say the same by day; a usage row's mechanism is streams.shadow.mechanisms' mapping (MECHANISM_SQL)."""

from __future__ import annotations

import datetime as dt

from streams.shadow.floors import parse_floors
from streams.shadow.guard import LABELLED_ONLY, wilson_lower
from streams.shadow.mechanisms import MECHANISM_SQL

Z = 1.645
SAVED = (
    f"SELECT {MECHANISM_SQL} AS mechanism, "
    "sum(toInt64(nominal_tokens) - toInt64(input_tokens + output_tokens)) AS saved "
    "FROM usage_events WHERE stage != 'shadow' AND ts >= {since:DateTime64(3)} GROUP BY mechanism"
)
JUDGED = (
    "SELECT mechanism, count() AS verdicts, countIf(agreed) AS agreed, countIf(kept) AS kept, "
    "countIf(labelled) AS labelled FROM shadow_verdicts FINAL ARRAY JOIN mechanisms AS mechanism "
    "WHERE ts >= {since:DateTime64(3)} GROUP BY mechanism"
)


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def agreement(client, since: dt.datetime, floors: str = "") -> dict:
    """{"overall": {...}, "by_mechanism": {mechanism: {...}}}: verdicts, agreed, agreement (agreed / verdicts),
    kept (agreement, or no accuracy lost where labelled), its lower bound and floor, and tokens_saved."""
    limits = parse_floors(floors)
    params = {"since": since}
    n, agreed, kept, labelled = client.query(
        "SELECT count(), countIf(agreed), countIf(kept), countIf(labelled) FROM shadow_verdicts FINAL "
        "WHERE ts >= {since:DateTime64(3)}",
        parameters=params,
    ).result_rows[0]
    overall = {
        "verdicts": int(n),
        "agreed": int(agreed),
        "agreement": _share(agreed, n),
        "kept": int(kept),
        "kept_share": _share(kept, n),
        "labelled": int(labelled),
    }
    saved = {m: int(t) for m, t in client.query(SAVED, parameters=params).result_rows if m}
    judged = {row[0]: [int(x) for x in row[1:]] for row in client.query(JUDGED, parameters=params).result_rows}
    by_mechanism = {}
    for mechanism in sorted(m for m in saved.keys() | judged.keys() if saved.get(m) or m in judged):
        verdicts, agreed_m, kept_m, labelled_m = judged.get(mechanism, (0, 0, 0, 0))
        by_mechanism[mechanism] = {
            "tokens_saved": saved.get(mechanism, 0),
            "verdicts": verdicts,
            "agreed": agreed_m,
            "agreement": _share(agreed_m, verdicts),
            "kept_share": _share(kept_m, verdicts),
            "lower": round(wilson_lower(kept_m, verdicts, Z), 4) if verdicts else None,
            "floor": limits.get(mechanism),
            "labelled": labelled_m,
            "judged_on": "labelled verdicts" if mechanism in LABELLED_ONLY else "all verdicts",
        }
    return {"overall": overall, "by_mechanism": by_mechanism}


def shadow_work(client, since: dt.datetime) -> dict:
    """What the measurement cost and what became of the sample: shadow tokens, twins dropped under load,
    samples skipped under pressure (usage rows of stage shadow)."""
    tokens, dropped, skipped = client.query(
        "SELECT sum(input_tokens + output_tokens), countIf(section = 'dropped'), countIf(section = 'skipped') "
        "FROM usage_events FINAL WHERE stage = 'shadow' AND ts >= {since:DateTime64(3)}",
        parameters={"since": since},
    ).result_rows[0]
    return {"tokens": int(tokens or 0), "dropped": int(dropped), "skipped": int(skipped)}
