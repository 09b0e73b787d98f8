"""The streaming fields and the Chunk record are in the JSON Schemas `jev schema` prints."""

import orjson

from schemas.topics import TOPICS
from workers.cli.main import main


def schema(name: str, capsys) -> dict:
    assert main(["schema", name]) == 0
    return orjson.loads(capsys.readouterr().out)


def test_request_schema_has_the_stream_fields(capsys):
    props = schema("request", capsys)["properties"]
    assert (props["stream"], props["client"], props["question_type"]) == (
        {"type": "boolean"},
        {"type": "string"},
        {"type": "string"},
    )


def test_chunk_schema_and_topic(capsys):
    doc = schema("chunk", capsys)
    assert set(doc["required"]) == {"request_id", "seq", "text", "tokens", "tokens_so_far", "progress"}
    assert doc["properties"]["final"] == {"type": "boolean"}
    assert TOPICS["chunks"].name == "jev.chunks.v1" and TOPICS["chunks"].key == "request_id"
    assert {"first_chunk_ms", "tokens_per_s"} <= set(schema("usage", capsys)["properties"])
