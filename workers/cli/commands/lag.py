"""`jev lag`: consumer lag per group, topic and partition."""

from __future__ import annotations

import sys

import orjson

DESCRIPTION = """Reads the broker at JEV_BROKER. For each consumer group and partition:
  committed  the offset the group committed (OffsetFetch): the next message it will read;
             '-' where the group committed nothing (lag then counts from offset 0)
  end        the partition's end offset, read as the high watermark of a Fetch response. Not ListOffsets
             LATEST: the local tansu broker answers that with the last batch's base offset + 1, wrong
             whenever a produced batch holds more than one record.
  lag        end - committed: messages written but not yet committed by the group, waiting or in flight
             (Faust commits processed offsets every few seconds, so a busy group shows some lag even
             when it keeps up).
A group appears for the topics where it committed an offset; --topic shows every partition of the topics
named. The local broker keeps offsets in memory: after a restart every group starts with none."""


def register(sub) -> None:
    import argparse

    p = sub.add_parser(
        "lag",
        help="consumer lag per group, topic and partition (end offset - committed offset)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="G",
        help="only this consumer group (repeatable; default every group the broker knows)",
    )
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="T",
        help="only this topic (repeatable; full name, e.g. jev.usage.v1)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per partition, then a summary line")
    p.set_defaults(func=run)


def summary(rows: list[dict]) -> dict:
    by_group: dict[str, dict[str, int]] = {}
    for r in rows:
        topics = by_group.setdefault(r["group"], {})
        topics[r["topic"]] = topics.get(r["topic"], 0) + (r["lag"] or 0)
    return {
        "groups": len(by_group),
        "partitions": len(rows),
        "lag": sum(r["lag"] or 0 for r in rows),
        "unknown_end": sum(r["end"] is None for r in rows),
        "by_group": by_group,
    }


def run(args, settings) -> int:
    import asyncio

    from aiokafka.errors import KafkaConnectionError

    from workers.analytics.lag import partition_lag

    try:
        rows = asyncio.run(partition_lag(settings.bootstrap, args.group or None, args.topic or None))
    except KafkaConnectionError as e:
        print(
            f"jev lag: no broker answered at {settings.bootstrap} ({e}); start one with `jev broker` or set JEV_BROKER",
            file=sys.stderr,
        )
        return 2
    if args.json:
        for row in rows:
            print(orjson.dumps(row).decode())
        print(orjson.dumps(summary(rows)).decode())
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("group", "topic", "partition", "committed", "end", "lag", title=f"consumer lag at {settings.broker}")
    for r in rows:
        table.add_row(
            r["group"],
            r["topic"],
            str(r["partition"]),
            "-" if r["committed"] is None else str(r["committed"]),
            "?" if r["end"] is None else str(r["end"]),
            "?" if r["lag"] is None else f"{r['lag']:,}",
        )
    Console().print(table)
    s = summary(rows)
    print(
        f"{s['lag']:,} messages behind over {s['partitions']} partitions of {s['groups']} groups"
        + (f"; {s['unknown_end']} end offsets unread ('?')" if s["unknown_end"] else ""),
        file=sys.stderr,
    )
    return 0
