"""The second stage process as docs/operations.md starts it must sign with the first one's key: with a key of its
own (its JEV_DATA_DIR's signing.key, as the recipe once had it), the two refused each other's requests-seen, usage
and lease records, and metering was lost."""

import re
import shlex
from pathlib import Path

from schemas.topics import name
from streams import settings as settings_mod
from streams.security import signing

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def second_stage_env() -> dict[str, str]:
    """The JEV_* assignments of the documented command that starts another stage process."""
    for line in DOC.read_text().splitlines():
        if "jev worker stream" not in line:
            continue
        words = shlex.split(line.split("#")[0])
        if words[-3:] == ["jev", "worker", "stream"] and any(w.startswith("JEV_DATA_DIR=") for w in words):
            return dict(w.split("=", 1) for w in words if re.match(r"JEV_\w+=", w))
    raise AssertionError("docs/operations.md no longer shows how to start another stage process")


def test_the_documented_second_stage_process_signs_with_the_first_ones_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the recipe's paths are relative to where both processes start
    env = second_stage_env()
    first, second = signing.load(settings_mod.load({})), signing.load(settings_mod.load(env))
    topic = name("usage")
    for value in (b'{"tenant": "acme"}', '{"tenant": "租户"}'.encode()):
        assert second.problem(topic, value, first.headers(topic, value)) == ""
        assert first.problem(topic, value, second.headers(topic, value)) == ""
    assert not (tmp_path / env["JEV_DATA_DIR"] / signing.KEY_FILE).exists(), "it made a key of its own"
