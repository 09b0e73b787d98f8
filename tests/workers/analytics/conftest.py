import datetime as dt

import pytest

from schemas.records import UsageEvent
from streams.runtime.usage_sink import UsageSink

NOW = dt.datetime(2026, 6, 10, 12, 30, tzinfo=dt.UTC)


def requests_at(
    hours_ago: float,
    n: int,
    tokens: int,
    *,
    tier: str = "fine",
    service: str = "search",
    decision_type: str = "ranking",
    session: str = "",
    prefix: str = "",
    nominal: int = 0,
    business_event: str = "search_session",
) -> list[UsageEvent]:
    """n decided requests `hours_ago` before NOW, each spending `tokens` in score;fine and answered by `tier`."""
    ts = (NOW - dt.timedelta(hours=hours_ago)).timestamp()
    out = []
    for i in range(n):
        rid = f"{prefix or f'h{hours_ago}'}-{i}"
        base = dict(
            request_id=rid,
            ts=ts,
            tenant="acme",
            service=service,
            business_line="marketplace",
            session_id=session or f"s-{rid}",
            user_id="u1",
            decision_type=decision_type,
            business_event=business_event,
        )
        out.append(
            UsageEvent(
                event_id=f"{rid}:score:fine",
                stage="score",
                stack=f"acme;{service};{decision_type};score;fine",
                model="gpt-4o-mini",
                input_tokens=tokens,
                output_tokens=0,
                nominal_tokens=nominal,
                cost=tokens * 1e-6,
                **base,
            )
        )
        out.append(
            UsageEvent(
                event_id=f"{rid}:postprocess",
                stage="postprocess",
                stack=f"acme;{service};{decision_type};postprocess",
                outcome=tier,
                latency_ms=10.0,
                **base,
            )
        )
    return out


@pytest.fixture
def load(usage_db):
    def insert(*batches):
        UsageSink(usage_db).insert([e for b in batches for e in b])
        return usage_db

    return insert
