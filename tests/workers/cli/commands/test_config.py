"""`jev config`: every setting once, section by section, as tables or JSON keyed by section; `--section` one."""

import dataclasses

import orjson

from streams.settings import SECTIONS, Settings
from workers.cli.main import main


def test_json_is_keyed_by_section_and_holds_every_setting_once(capsys, monkeypatch):
    monkeypatch.setenv("JEV_CACHE_EMBEDDER", "e5")
    assert main(["config", "--json"]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert list(shown) == list(SECTIONS)
    variables = [variable for section in shown.values() for variable in section]
    assert sorted(variables) == sorted(f"JEV_{f.name.upper()}" for f in dataclasses.fields(Settings))
    assert shown["cache"]["JEV_CACHE_EMBEDDER"] == "e5"


def test_one_section_as_a_table_and_as_json(capsys):
    assert main(["config", "--section", "cache"]) == 0
    table = capsys.readouterr().out
    assert SECTIONS["cache"] in table and "JEV_CACHE_EMBEDDER" in table
    assert "JEV_BROKER" not in table and "JEV_GATEWAY_TIMEOUT_S" not in table
    assert main(["config", "--section", "cache", "--json"]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert list(shown) == ["cache"] and all(variable.startswith("JEV_CACHE_") for variable in shown["cache"])


def test_the_tables_show_every_section_in_order(capsys):
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    titles = [out.index(f"{section}: ") for section in SECTIONS]
    assert titles == sorted(titles)


def test_an_unknown_section_names_the_sections(capsys):
    assert main(["config", "--section", "caches"]) == 2
    err = capsys.readouterr().err
    assert "no section 'caches'" in err and ", ".join(SECTIONS) in err
