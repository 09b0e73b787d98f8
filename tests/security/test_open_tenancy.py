"""A first deployment keeps the defaults (JEV_TENANTS=*, no JEV_TENANT_KEYS), under which any producer may send as
any tenant and spend its budgets (the issue's probe: 3 requests as acme, 165 tokens charged to acme). A stage
process now says so at start, naming the fix, and exports jev_open_tenancy{allows}; with keys set it says nothing
and the gauge is 0."""

import logging

import orjson
from prometheus_client import REGISTRY

from streams.security import tenancy


def gauge(allows: str) -> float:
    return REGISTRY.get_sample_value("jev_open_tenancy", {"allows": allows})


def test_the_open_default_is_said_loudly_at_start_and_exported(app_and_sent, settings, caplog):
    """create_app (the app_and_sent fixture, default tenant settings) announced it when ingest was registered."""
    assert gauge("any_tenant") == 1 and gauge("named_tenants") == 0
    with caplog.at_level(logging.WARNING, logger="jev.tenancy"):
        assert tenancy.announce(settings) == "any_tenant"
    said = caplog.records[-1].getMessage()
    assert "ANY tenant" in said and "JEV_TENANT_KEYS" in said and "docs/operations.md" in said


def test_named_tenants_without_keys_are_still_open_and_keys_close_it(settings, tmp_path, caplog):
    named = settings.replace(tenants="acme,globex")
    with caplog.at_level(logging.WARNING, logger="jev.tenancy"):
        assert tenancy.announce(named) == "named_tenants"
    assert "acme, globex" in caplog.records[-1].getMessage()
    assert gauge("named_tenants") == 1 and gauge("any_tenant") == 0
    keys = tmp_path / "keys.json"
    keys.write_bytes(orjson.dumps({"acme": "acme-key-0123456789abcdef"}))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jev.tenancy"):
        assert tenancy.announce(named.replace(tenant_keys=str(keys))) == ""
    assert not caplog.records
    assert gauge("named_tenants") == 0 and gauge("any_tenant") == 0
