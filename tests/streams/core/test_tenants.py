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


def test_a_tenant_slug_is_a_valid_topic_part_that_decodes_back_and_holds_no_dot():
    import re

    from streams.core.tenants import canonical, reply_topic, slug, unslug

    names = ["acme", "wayne.corp", "wayne_corp", "wayne-corp", "a.b_c", "中文", "中文.客服", "x中", "中" * 64]
    slugs = {name: slug(name) for name in names}
    assert len(set(slugs.values())) == len(names)  # no two tenants share a slug
    assert all(unslug(s) == canonical(n) for n, s in slugs.items())
    assert all(re.fullmatch(r"[a-z0-9_-]+", s) for s in slugs.values())  # no '.': a prefix ends at the slug
    assert slug("ACME") == slug("ａｃｍｅ") == "acme"  # one spelling per tenant, one slug
    assert slugs["中文"] == "_ffxk1z" and slugs["wayne.corp"] == "wayne_01a_corp"
    assert len(reply_topic("batch_results", "中" * 64)) <= 249  # Kafka's longest topic name
    topics = [reply_topic("decisions", n) for n in names]
    assert not any(a != b and b.startswith(a.rsplit(".", 2)[0] + ".") for a in topics for b in topics)


def test_a_reply_kind_or_slug_that_does_not_exist_is_named():
    from streams.core.tenants import reply_topic, unslug

    with pytest.raises(ValueError, match="choose one of decisions, chunks"):
        reply_topic("usage", "acme")
    with pytest.raises(ValueError, match="3 base-36 digits"):
        unslug("a_0")
