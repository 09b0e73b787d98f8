import orjson

from workers.cli.main import main, parser


def test_help_lists_every_command():
    text = parser().format_help()
    for command in ("demo", "schema", "config"):
        assert command in text


def test_schema_request_prints_a_json_schema(capsys):
    assert main(["schema", "request"]) == 0
    schema = orjson.loads(capsys.readouterr().out)
    assert schema["title"] == "Request" and "request_id" in schema["required"]


def test_config_json_shows_env_backed_settings(capsys, monkeypatch):
    monkeypatch.setenv("JEV_PARTITIONS", "8")
    assert main(["config", "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["kafka"]["JEV_PARTITIONS"] == "8"
