"""`jev schema NAME`: the JSON Schema upstream producers validate against."""

from __future__ import annotations

import orjson

from schemas import records
from schemas.jsonschema import document

RECORDS = {
    "request": records.Request,
    "decision": records.Decision,
    "usage": records.UsageEvent,
    "control": records.Control,
    "rejection": records.Rejection,
    "alert": records.Alert,
    "chunk": records.Chunk,
}


def register(sub) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of a record (request, decision, …)")
    p.add_argument("name", choices=sorted(RECORDS), help="which record")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    print(orjson.dumps(document(RECORDS[args.name]), option=orjson.OPT_INDENT_2).decode())
    return 0
