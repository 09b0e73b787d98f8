"""Sensitive-word scan (Aho-Corasick) and the patterns file's validation."""

from __future__ import annotations

import pytest

from streams.output.patterns import BUNDLED, load
from streams.output.sensitive import SensitiveScanner

SCANNER = SensitiveScanner(["ass", "Secret Plan", "机密", "-----BEGIN RSA PRIVATE KEY-----"])


@pytest.mark.parametrize(
    "text, hits",
    [
        ("a class of bass players", []),  # ASCII words match whole words only
        ("You ass.", ["ass"]),
        ("the SECRET PLAN is out", ["Secret Plan"]),
        ("这是机密文件", ["机密"]),  # CJK entries match anywhere
        ("key:\n-----BEGIN RSA PRIVATE KEY-----\nMII", ["-----BEGIN RSA PRIVATE KEY-----"]),
        ("机密 and ass and 机密 again", ["机密", "ass"]),  # each once, in order of first hit
        ("", []),
    ],
)
def test_scan(text, hits):
    assert SCANNER.scan(text) == hits


def test_dictionaries_are_configurable(tmp_path):
    (tmp_path / "words.txt").write_text("# one word a line\nproject falcon\n\n")
    (tmp_path / "more.yaml").write_text("words: [内部代号]\n")
    config = tmp_path / "patterns.yaml"
    config.write_text(
        BUNDLED.read_text().replace("dictionaries: [sensitive_words.yaml]", "dictionaries: [words.txt, more.yaml]")
    )
    scanner = load(str(config)).scanner
    assert scanner.scan("Project Falcon ships in May (内部代号)") == ["project falcon", "内部代号"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (("version:", "versio:"), "add a `version` field"),
        (("fences: keep", "fences: drop"), "fences is 'drop'"),
        (("dictionaries: [sensitive_words.yaml]", "dictionaries: [missing.txt]"), "missing.txt not found"),
        (("  - 'enjoy(", "  - '(enjoy("), "bad regex under closers"),
    ],
)
def test_bad_patterns_files_name_the_fix(tmp_path, edit, message):
    config = tmp_path / "patterns.yaml"
    text = BUNDLED.read_text()
    assert edit[0] in text
    config.write_text(text.replace(edit[0], edit[1], 1))
    (tmp_path / "sensitive_words.yaml").write_text("words: []\n")
    with pytest.raises((ValueError, FileNotFoundError), match=message.replace("(", r"\(")):
        load(str(config))
