"""The signing keyring: a key per data directory by default (created once, 0600, shared by the processes that
start together), named key files with a rotation (new signs, old still verifies), and signatures bound to the
topic and the exact bytes."""

import os
import stat
from concurrent.futures import ProcessPoolExecutor

import pytest

from schemas.topics import name
from streams.security import signing
from streams.security.signing import Keyring, SigningKeyError

CONTROL, USAGE = name("control"), name("usage")


def test_a_signature_holds_for_its_topic_and_bytes_only():
    keys = Keyring([b"k" * 32])
    headers = keys.headers(CONTROL, b'{"kind": "switch"}')
    assert keys.problem(CONTROL, b'{"kind": "switch"}', headers) == ""
    assert keys.problem(CONTROL, b'{"kind": "switch" }', headers) == "bad signature"
    assert keys.problem(USAGE, b'{"kind": "switch"}', headers) == "bad signature"  # no replay across topics
    assert keys.problem(CONTROL, b'{"kind": "switch"}', ()) == "unsigned"
    assert keys.headers(name("decisions"), b"x") == [] and keys.problem(name("decisions"), b"x", ()) == ""


@pytest.mark.parametrize("header", [None, b"", b"\xff\xfe:\xe9\xe9", b"k" * 5000, b"x" + b":\x00"])
def test_any_bytes_in_the_signature_header_are_a_reason_never_an_error(header):
    keys = Keyring([b"k" * 32])
    kid = keys.signing_id.encode()
    for value in (header, kid + b":" + (header or b"")):
        reason = keys.problem(CONTROL, b"{}", [(signing.HEADER, value)])
        assert reason == "bad signature" or reason.startswith("signed with an unknown key")


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


def test_a_short_key_or_a_missing_verifying_key_names_the_fix(tmp_path, settings):
    short = tmp_path / "short.key"
    short.write_text("abc")
    with pytest.raises(SigningKeyError, match="at least 16 random bytes"):
        signing.load(settings.replace(signing_key_file=str(short)))
    with pytest.raises(SigningKeyError, match="JEV_SIGNING_KEY_FILE"):
        signing.load(settings.replace(signing_key_file=f"{tmp_path / 'new.key'},{tmp_path / 'absent-old.key'}"))


def test_a_named_signing_key_that_is_missing_is_created_for_the_fleet_to_share(tmp_path, settings):
    shared = tmp_path / "volume" / "signing.key"
    first = signing.load(settings.replace(signing_key_file=str(shared)))
    again = signing.load(settings.replace(data_dir=str(tmp_path / "other"), signing_key_file=str(shared)))
    assert first.signing_id == again.signing_id and stat.S_IMODE(os.stat(shared).st_mode) == 0o600


def load_in_child(settings) -> str:
    return signing.load(settings).signing_id


def test_the_default_key_is_created_once_per_data_directory_mode_0600(settings):
    with ProcessPoolExecutor(4) as pool:
        ids = set(pool.map(load_in_child, [settings] * 8))
    path = signing.key_files(settings)[0]
    assert len(ids) == 1 and ids == {signing.load(settings).signing_id}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["signing.key"]  # no temporary left behind
