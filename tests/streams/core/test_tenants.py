"""Tenant names in settings: JEV_TENANTS and JEV_TENANT_KEYS name tenants in their one spelling, and a bad entry
stops the process with the setting named (tests/security/test_tenant_identity.py: names on requests)."""

import pytest

from streams.core.tenants import SIGNATURE_HEADER, admitted, load_keys, request_key, unbound


def test_jev_tenants_are_folded_like_request_tenants():
    assert admitted("*") is None
    assert admitted("Acme, ｇｌｏｂｅｘ ,,") == frozenset({"acme", "globex"})
    with pytest.raises(SystemExit, match="JEV_TENANTS: .*U\\+200B"):
        admitted("acme,glo\u200bbex")


def test_tenant_keys_name_the_setting_and_the_fix(tmp_path):
    assert load_keys("") is None
    path = tmp_path / "keys.json"
    path.write_text('{"acme": "short"}')
    with pytest.raises(SystemExit, match="JEV_TENANT_KEYS=.*openssl rand"):
        load_keys(str(path))
    path.write_text('["acme"]')
    with pytest.raises(SystemExit, match="expected a JSON object"):
        load_keys(str(path))
    with pytest.raises(SystemExit, match="JEV_TENANT_KEYS="):
        load_keys(str(tmp_path / "absent.json"))


def test_any_bytes_in_a_tenant_signature_are_a_reason_never_an_error():
    keys = {"acme": b"a" * 32}
    for header in (None, b"\xff\xfe", b"z" * 4000):
        assert "does not match" in unbound(keys, "acme", b"{}", [(SIGNATURE_HEADER, header)])


def test_a_request_key_prefixes_each_part_with_its_length():
    assert request_key("acme", "r1") == "4:acme/2:r1"
    assert len({request_key(t, r) for t, r in [("a/b", "c"), ("a", "b/c"), ("a", "b:c"), ("a:b", "c")]}) == 4
