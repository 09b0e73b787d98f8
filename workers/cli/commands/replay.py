"""`jev replay --since 7d`: re-score recorded requests with a new configuration; agreement and token deltas."""

from __future__ import annotations

import asyncio

import orjson


def register(sub) -> None:
    p = sub.add_parser(
        "replay",
        help="re-score recorded requests with a new configuration and compare",
        description="Reads the requests and decisions topics of the running broker (JEV_BROKER), "
        "decides every recorded request again with the engine as configured now "
        "(JEV_BACKEND, JEV_DECISION_TYPES, JEV_RULES, --mode) and reports agreement "
        "with the recorded decisions and the token delta. Cache hits are not compared.",
    )
    p.add_argument("--since", default="7d", help="how far back to replay: 30m, 24h, 7d (default 7d)")
    p.add_argument("--mode", default="cascade", choices=["cascade", "fine-only", "coarse-only"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    from schemas.records import Decision
    from schemas.topics import name
    from streams.ingest.decode import Admission
    from streams.ingest.templates import Templates
    from streams.scoring.factory import build_engine
    from workers.harness.pipeline import known_decision_types
    from workers.harness.replay import compare, read_topic, since_ms

    try:
        start = since_ms(args.since)
    except ValueError as exc:
        print(f"jev replay: {exc}")
        return 2

    async def read():
        return (
            await read_topic(settings.bootstrap, name("requests"), start),
            await read_topic(settings.bootstrap, name("decisions"), start),
        )

    requests, decisions = asyncio.run(read())
    recorded = {d.request_id: d for d in (Decision.loads(m.value) for m in decisions)}
    known = frozenset(known_decision_types(settings.decision_types))
    admission = Admission(
        settings.max_record_bytes,
        settings.default_model,
        known,
        Templates.from_dir(),
        max_field_bytes=settings.max_field_bytes,
    )
    summary = compare(build_engine(settings, args.mode), admission, [m.value for m in requests], recorded)
    print(orjson.dumps(summary).decode() if args.json else "\n".join(f"{k:>16}: {v}" for k, v in summary.items()))
    return 0
