"""A hostile tenant's ordinary mistakes and attacks at ingest, in English and Chinese: each rejection reason is
counted in jev_rejected_total{reason} (before: no such series), its detail names the fix, and a denied write is
logged with the tenant it claimed and its request id, never its payload."""

import dataclasses
import logging

import orjson
import pytest
from prometheus_client import REGISTRY

from schemas.records import Control
from streams.core.tenants import SIGNATURE_HEADER, signature
from tests.streams.runtime.test_agents import REQUEST, requests

KEYS = {
    "acme": "acme-key-0123456789abcdef",
    "globex": "globex-key-0123456789abcdef",
    "initech": "initech-key-0123456789abcdef",
}
SECRET = "SECRET-PAYLOAD 机密内容"
# the fix each reason's detail names (a word of it)
FIXES = {
    "bad_json": "JSON",
    "missing_field": "request_id",
    "bad_tenant": "U+0435",
    "unknown_tenant": "JEV_TENANTS",
    "unauthenticated_tenant": SIGNATURE_HEADER,
    "rate_limited": "again after",
    "over_budget": "budget",
    "duplicate_request_id": "request_id",
    "too_large": "JEV_MAX_RECORD_BYTES",
}


@pytest.fixture
def settings(settings, tmp_path):
    path = tmp_path / "tenant-keys.json"
    path.write_bytes(orjson.dumps(KEYS))
    return settings.replace(tenant_keys=str(path), tenants="acme,globex,initech", tenant_rates="acme=3:0")


def rejected(reason: str) -> float:
    return REGISTRY.get_sample_value("jev_rejected_total", {"reason": reason}) or 0.0


def signed(raw: bytes, tenant: str) -> tuple:
    return ((SIGNATURE_HEADER, signature(KEYS[tenant].encode(), raw).encode()),)


async def test_every_rejection_reason_is_counted_names_its_fix_and_a_denied_write_logs_no_payload(app_and_sent, caplog):
    app, captured = app_and_sent
    app.controls.apply(Control(kind="budget", key="tenant:globex", value={"hard_tokens": 1}))
    body = {**REQUEST, "state": SECRET}
    own = [orjson.dumps({**body, "request_id": f"acme-{i}", "state": f"{SECRET} {i}"}) for i in range(4)]
    cases = [
        (b"{not json", None),
        (orjson.dumps({k: v for k, v in body.items() if k != "request_id"}), None),
        (orjson.dumps({**body, "request_id": "cyr", "tenant": "globеx"}), None),  # a Cyrillic е
        (orjson.dumps({**body, "request_id": "init", "tenant": "umbrella"}), "acme"),
        (orjson.dumps({**body, "request_id": "forged", "tenant": "acme"}), None),
        *((raw, "acme") for raw in own),  # the 4th is over acme's 3/s
        (orjson.dumps({**body, "request_id": "g1", "tenant": "globex"}), "globex"),
        (orjson.dumps({**body, "request_id": "i1", "tenant": "initech"}), "initech"),
        (orjson.dumps({**body, "request_id": "i1", "tenant": "initech", "state": "其他内容"}), "initech"),
        (orjson.dumps({**body, "request_id": "big", "tenant": "initech", "state": "x" * 300_000}), "initech"),
    ]
    before = {reason: rejected(reason) for reason in FIXES}
    messages = requests([raw for raw, _ in cases])
    messages = [
        dataclasses.replace(m, headers=signed(raw, who) if who else ()) for m, (raw, who) in zip(messages, cases)
    ]
    with caplog.at_level(logging.WARNING, logger="jev.tenancy"):
        await app.ingest.hand_over(messages)
    reasons = [r.reason for r in captured.sent["rejected"]]
    assert sorted(set(reasons)) == sorted(FIXES)
    for reason, fix in FIXES.items():
        assert rejected(reason) - before[reason] == reasons.count(reason), reason
        detail = next(r.detail for r in captured.sent["rejected"] if r.reason == reason)
        assert fix in detail, f"{reason}: {detail!r} does not name its fix ({fix})"
    denied = [r.getMessage() for r in caplog.records if r.name == "jev.tenancy" and "denied write" in r.getMessage()]
    assert any("'acme'" in line and "unauthenticated_tenant" in line and "'forged'" in line for line in denied)
    assert any("'umbrella'" in line and "unknown_tenant" in line for line in denied)
    assert not any(SECRET.split()[0] in line or "机密" in line for line in denied)  # never the payload
