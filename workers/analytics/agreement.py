"""Agreement beside savings: per saving mechanism, the tokens it saved and the share of shadow verdicts it
kept (migration 005: shadow_verdicts, agreement_by_mechanism_day), with the Wilson lower bound the guard
compares with the mechanism's floor."""
from __future__ import annotations

import datetime as dt

from streams.shadow.floors import parse_floors
from streams.shadow.guard import wilson_lower

Z = 1.645


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def agreement(client, since: dt.datetime, floors: str = "") -> dict:
    """{"overall": {...}, "by_mechanism": {mechanism: {...}}}: verdicts, agreed, agreement (agreed / verdicts),
    kept (agreement, or no accuracy lost where labelled), its lower bound and floor, and tokens_saved."""
    limits = parse_floors(floors)
    params = {"since": since}
    n, agreed, kept, labelled = client.query(
        "SELECT count(), countIf(agreed), countIf(kept), countIf(labelled) FROM shadow_verdicts FINAL "
        "WHERE ts >= {since:DateTime64(3)}", parameters=params).result_rows[0]
    overall = {"verdicts": int(n), "agreed": int(agreed), "agreement": _share(agreed, n), "kept": int(kept),
               "kept_share": _share(kept, n), "labelled": int(labelled)}
    by_mechanism = {}
    for mechanism, saved, verdicts, agreed_m, kept_m, labelled_m in client.query(
            "SELECT mechanism, sum(tokens_saved), sum(verdicts), sum(agreed), sum(kept), sum(labelled) "
            "FROM agreement_by_mechanism_day WHERE day >= toDate({since:DateTime64(3)}) AND mechanism != 'all' "
            "GROUP BY mechanism ORDER BY mechanism", parameters=params).result_rows:
        verdicts, kept_m = int(verdicts), int(kept_m)
        by_mechanism[mechanism] = {
            "tokens_saved": int(saved), "verdicts": verdicts, "agreed": int(agreed_m),
            "agreement": _share(agreed_m, verdicts), "kept_share": _share(kept_m, verdicts),
            "lower": round(wilson_lower(kept_m, verdicts, Z), 4) if verdicts else None,
            "floor": limits.get(mechanism), "labelled": int(labelled_m)}
    return {"overall": overall, "by_mechanism": by_mechanism}


def shadow_work(client, since: dt.datetime) -> dict:
    """What the measurement cost and what became of the sample: shadow tokens, twins dropped under load,
    samples skipped under pressure (usage rows of stage shadow)."""
    tokens, dropped, skipped = client.query(
        "SELECT sum(input_tokens + output_tokens), countIf(section = 'dropped'), countIf(section = 'skipped') "
        "FROM usage_events FINAL WHERE stage = 'shadow' AND ts >= {since:DateTime64(3)}",
        parameters={"since": since}).result_rows[0]
    return {"tokens": int(tokens or 0), "dropped": int(dropped), "skipped": int(skipped)}
