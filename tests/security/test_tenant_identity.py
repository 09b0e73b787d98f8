"""Tenant identity cannot be bent: with a hard budget on `wayne` that admits one request, each spelling the issue
tried (a trailing space, `Wayne`, a Cyrillic `а`, a zero-width space, full-width letters, U+202E, a combining
accent) is either folded into `wayne`, and so spends from wayne's budget, or rejected `bad_tenant` naming the
character; none is a tenant of its own. And no (tenant, request) pair shares a key with another: `acme/coll` +
`r1` and `acme` + `coll/r1` are both billed."""

from __future__ import annotations

import re

import orjson
import pytest

from schemas.records import Control, Request
from streams.core.tenants import BadTenant, canonical, request_key
from streams.idempotency.requests import log_key, reservation_key
from streams.runtime.usage_sink import UsageSink
from streams.usage.events import event_key, usage_event
from tests.streams.runtime.test_agents import REQUEST, requests

FOLDED = {"trailing space": "wayne ", "capital": "Wayne", "full-width": "ｗａｙｎｅ", "leading tab": "\twayne"}
REJECTED = {
    "cyrillic а": ("wаyne", "U+0430 CYRILLIC SMALL LETTER A"),
    "zero-width space": ("way\u200bne", "U+200B ZERO WIDTH SPACE"),
    "right-to-left override": ("\u202ewayne", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    "combining accent": ("wayne\u0301", "U+0301 COMBINING ACUTE ACCENT"),
    "precomposed accent": ("wayné", "U+00E9 LATIN SMALL LETTER E WITH ACUTE"),
    "control character": ("way\x00ne", "U+0000"),
    "slash": ("acme/coll", "U+002F SOLIDUS"),
    "inner space": ("way ne", "U+0020 SPACE"),
}


@pytest.mark.parametrize("spelling", FOLDED.values(), ids=FOLDED.keys())
def test_a_variant_spelling_folds_into_the_one_name(spelling):
    assert canonical(spelling) == "wayne"


@pytest.mark.parametrize("spelling, named", REJECTED.values(), ids=REJECTED.keys())
def test_a_name_with_a_hidden_or_lookalike_character_is_refused_naming_it(spelling, named):
    with pytest.raises(BadTenant, match=re.escape(named)):
        canonical(spelling)


def test_chinese_and_plain_names_are_names():
    assert canonical("阿里巴巴") == "阿里巴巴" and canonical("Globex-EU_2.prod") == "globex-eu_2.prod"


def admitted(captured) -> list[str]:
    return [w.request.tenant for b in captured.sent.get("distilled", []) for w in b.items]


async def test_a_hard_budget_on_wayne_holds_against_every_spelling(app_and_sent):
    """The issue's probe: 8 of 8 admitted per spelling, each its own tenant in ClickHouse; now 1 of them in all."""
    app, captured = app_and_sent
    app.controls.apply(Control(kind="budget", key="tenant:wayne", value={"hard_tokens": 15}))  # a request holds 11
    spellings = ["wayne", *FOLDED.values(), *(s for s, _ in REJECTED.values())]
    await app.ingest.hand_over(
        requests([orjson.dumps({**REQUEST, "request_id": f"r{i}", "tenant": t}) for i, t in enumerate(spellings)])
    )
    assert admitted(captured) == ["wayne"]  # one request fits the budget; every other spelling is wayne or refused
    reasons = {r.request_id: r.reason for r in captured.sent["rejected"]}
    assert [reasons[f"r{i}"] for i in range(1, 1 + len(FOLDED))] == ["over_budget"] * len(FOLDED)
    assert set(reasons.values()) == {"over_budget", "bad_tenant"}
    assert len(reasons) == len(spellings) - 1
    cyrillic = next(r for r in captured.sent["rejected"] if r.request_id == f"r{1 + len(FOLDED)}")
    assert cyrillic.reason == "bad_tenant" and "CYRILLIC SMALL LETTER A" in cyrillic.detail
    assert {e.tenant for b in captured.sent["usage"] for e in b.events} == {"wayne"}


def test_the_slash_collision_is_impossible(usage_db):
    """`acme/coll` + `r1` was decided and never billed: its ids equalled `acme`'s `coll/r1`. Every key built from a
    (tenant, request) is length-prefixed, so the two never meet, even for a tenant name ingest would refuse."""
    pairs = [("acme/coll", "r1"), ("acme", "coll/r1")]
    for build in (request_key, reservation_key, log_key, lambda t, r: event_key(t, r, "score", "fine")):
        assert build(*pairs[0]) != build(*pairs[1])
    assert event_key("acme", "r1:score", "ingest") != event_key("acme", "r1", "score", "ingest")
    events = [
        usage_event(Request.from_data({**REQUEST, "tenant": t, "request_id": r}), "score", input_tokens=60)
        for t, r in pairs
    ]
    assert UsageSink(usage_db).insert(events) == 2
    billed = usage_db.query(
        "SELECT tenant, request_id, sum(input_tokens) FROM usage_events GROUP BY tenant, request_id ORDER BY tenant"
    ).result_rows
    assert billed == [("acme", "coll/r1", 60), ("acme/coll", "r1", 60)]


def test_with_tenant_keys_a_producer_spends_only_as_the_tenants_whose_key_it_holds(tmp_path):
    """The issue's probe: any producer could write "tenant": "globex" and spend as globex."""
    from streams.core.tenants import SIGNATURE_HEADER, load_keys, signature
    from streams.ingest.decode import Admission, admit

    path = tmp_path / "tenant-keys.json"
    path.write_text('{"Globex": "globex-key-0123456789abcdef", "acme": "acme-key-0123456789abcdef"}')
    keys = load_keys(str(path))
    policy = Admission(1_048_576, "gpt-4o-mini", frozenset({"ranking"}), tenant_keys=keys)
    raw = orjson.dumps({**REQUEST, "tenant": "globex"})
    signed_by = {t: ((SIGNATURE_HEADER, signature(k, raw).encode()),) for t, k in keys.items()}
    assert admit(raw, policy, headers=signed_by["globex"]).request.tenant == "globex"
    for headers, says in (((), "no jev-tenant-sig header"), (signed_by["acme"], "may not write for 'globex'")):
        refused = admit(raw, policy, headers=headers)
        assert refused.reason == "unauthenticated_tenant" and says in refused.detail
    other = orjson.dumps({**REQUEST, "tenant": "initech"})
    assert "no producer key" in admit(other, policy, headers=signed_by["acme"]).detail
    assert admit(raw, Admission(1_048_576, "gpt-4o-mini", frozenset({"ranking"}))).request.tenant == "globex"
