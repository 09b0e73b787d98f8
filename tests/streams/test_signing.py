"""The signing keyring: a key per data directory by default (created once, 0600, shared by the processes that
start together), named key files with a rotation (new signs, old still verifies), and signatures bound to the
topic and the exact bytes."""
import os
import stat
from concurrent.futures import ProcessPoolExecutor

import pytest

from schemas.topics import name
from streams import signing
from streams.signing import Keyring, SigningKeyError

CONTROL, USAGE = name("control"), name("usage")


def test_a_signature_holds_for_its_topic_and_bytes_only():
    keys = Keyring([b"k" * 32])
    headers = keys.headers(CONTROL, b'{"kind": "switch"}')
    assert keys.problem(CONTROL, b'{"kind": "switch"}', headers) == ""
    assert keys.problem(CONTROL, b'{"kind": "switch" }', headers) == "bad signature"
    assert keys.problem(USAGE, b'{"kind": "switch"}', headers) == "bad signature"  # no replay across topics
    assert keys.problem(CONTROL, b'{"kind": "switch"}', ()) == "unsigned"
    assert keys.headers(name("decisions"), b"x") == [] and keys.problem(name("decisions"), b"x", ()) == ""


def test_a_rotation_verifies_old_and_new_and_signs_with_the_first(tmp_path, settings):
    new, old = tmp_path / "new.key", tmp_path / "old.key"
    new.write_text("n" * 64)
    old.write_text("o" * 64)
    before = Keyring([old.read_bytes()]).headers(USAGE, b"v")
    rotating = signing.load(settings.replace(signing_key_file=f"{new},{old}"))
    assert rotating.problem(USAGE, b"v", before) == ""
    after = rotating.headers(USAGE, b"v")
    assert signing.load(settings.replace(signing_key_file=str(new))).problem(USAGE, b"v", after) == ""
    assert "unknown key" in signing.load(settings.replace(signing_key_file=str(new))).problem(USAGE, b"v", before)


def test_a_short_or_missing_key_file_names_the_fix(tmp_path, settings):
    short = tmp_path / "short.key"
    short.write_text("abc")
    with pytest.raises(SigningKeyError, match="at least 16 random bytes"):
        signing.load(settings.replace(signing_key_file=str(short)))
    with pytest.raises(SigningKeyError, match="JEV_SIGNING_KEY_FILE"):
        signing.load(settings.replace(signing_key_file=str(tmp_path / "absent.key")))


def load_in_child(settings) -> str:
    return signing.load(settings).signing_id


def test_the_default_key_is_created_once_per_data_directory_mode_0600(settings):
    with ProcessPoolExecutor(4) as pool:
        ids = set(pool.map(load_in_child, [settings] * 8))
    path = signing.key_files(settings)[0]
    assert len(ids) == 1 and ids == {signing.load(settings).signing_id}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["signing.key"]  # no temporary left behind
