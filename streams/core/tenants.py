"""Tenant identity: one spelling per tenant, and keys that never let two (tenant, request) pairs meet.

Budgets, idempotency, usage and reports are keyed by the tenant name, so two spellings would be two tenants (a hard
budget on `wayne` evaded by `Wayne` or a Cyrillic `а`). `canonical` applies NFKC, trims, case-folds and checks the
tenant character set (ASCII letters and digits, `.`, `_`, `-`, CJK ideographs), refusing anything else as
`bad_tenant`; `request_key` prefixes each part with its length. Which producer may spend as which tenant
(JEV_TENANTS, JEV_TENANT_KEYS, signed requests): docs/operations.md.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata
from pathlib import Path

MAX_LENGTH = 64
ALLOWED = re.compile(r"[a-z0-9\u3400-\u4dbf\u4e00-\u9fff][a-z0-9._\-\u3400-\u4dbf\u4e00-\u9fff]*")
HIDDEN = {
    "Cc": "a control character",
    "Cf": "an invisible format character (zero-width or bidi control)",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Mn": "a combining mark",
    "Me": "a combining mark",
}
CHARSET = "ASCII letters and digits, '.', '_', '-' and CJK ideographs, starting with a letter, digit or ideograph"


class BadTenant(ValueError):
    pass


def canonical(name: str) -> str:
    """The one spelling of tenant `name` (NFKC, trimmed, case folded), or BadTenant saying what is wrong."""
    if not isinstance(name, str):
        raise BadTenant(f"tenant must be a string, got {type(name).__name__}")
    for char in name:  # before normalising: NFKC would drop some of these silently
        kind = HIDDEN.get(unicodedata.category(char))
        if kind is not None and not char.isspace():
            raise BadTenant(f"tenant {name!r} holds {described(char)}, {kind}: remove it (tenant names are {CHARSET})")
    folded = unicodedata.normalize("NFKC", name).strip().casefold()
    if not folded:
        raise BadTenant("tenant must be a non-empty string naming the tenant the request spends for")
    if len(folded) > MAX_LENGTH:
        raise BadTenant(f"tenant {folded[:MAX_LENGTH]!r}… is {len(folded)} characters long; the most is {MAX_LENGTH}")
    if not ALLOWED.fullmatch(folded):
        bad = next((c for c in folded if not ALLOWED.fullmatch("a" + c)), folded[0])
        raise BadTenant(
            f"tenant {name!r} holds {described(bad)}, outside the tenant character set ({CHARSET}): "
            f"use the tenant's plain name"
        )
    return folded


def described(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed character')}"


def admitted(text: str) -> frozenset[str] | None:
    """JEV_TENANTS as the set of canonical names admitted: '*' → None (any valid name)."""
    if text.strip() == "*":
        return None
    try:
        return frozenset(canonical(t) for t in text.split(",") if t.strip())
    except BadTenant as exc:
        raise SystemExit(f"JEV_TENANTS: {exc}") from None


def request_key(tenant: str, request_id: str) -> str:
    """A request's identity as one string, each part length-prefixed so no two (tenant, request_id) share it."""
    return f"{len(tenant)}:{tenant}/{len(request_id)}:{request_id}"


# A tenant's replies (decisions, chunks of streamed answers, rejections, decisions held for review, batch results)
# go to topics under one prefix per tenant, `jev.tenant.<slug>.`, so one prefixed Kafka ACL gives a tenant's
# principals its replies and nothing else. Jev's own all-tenant copies stay on the internal topics of
# schemas/topics.py (docs/operations.md, the ACL table).
REPLY_KINDS = ("decisions", "chunks", "rejected", "review", "batch_results")
REPLY_PREFIX = "jev.tenant."
SLUG_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def slug(tenant: str) -> str:
    """`tenant` (any spelling: made canonical first) as a topic-name part that no other tenant shares.

    Kafka topic names allow `[a-zA-Z0-9._-]`, at most 249 characters; a tenant name may hold `.`, `_` and CJK
    ideographs. Letters, digits and `-` stay as they are; every run of other characters becomes `_`, each
    character as its code point in 3 base-36 digits, and `_` again unless the name ends there (`wayne.corp` is
    `wayne_01a_corp`, `中文` is `_ffxk1z`). The slug decodes back to the name (`unslug`), so two tenants never
    share one, and it holds no `.`: the prefix `jev.tenant.<slug>.` of one tenant is never a prefix of another's
    topics. The longest (64 ideographs) is 193 characters."""
    name = canonical(tenant)
    out, run = [], False
    for char in name:
        if char in SLUG_PLAIN:
            if run:
                out.append("_")
                run = False
            out.append(char)
            continue
        if not run:
            out.append("_")
            run = True
        code = ord(char)
        out.append(BASE36[code // 1296] + BASE36[code // 36 % 36] + BASE36[code % 36])
    return "".join(out)


def unslug(text: str) -> str:
    """The tenant name `slug` made `text` from (ValueError for a string no tenant's slug is)."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "_":
            out.append(text[i])
            i += 1
            continue
        i += 1
        while i < len(text) and text[i] != "_":
            digits = text[i : i + 3]
            if len(digits) < 3 or any(d not in BASE36 for d in digits):
                raise ValueError(f"{text!r} is not a tenant slug: an escape needs 3 base-36 digits at {i}")
            out.append(chr(int(digits, 36)))
            i += 3
        i += 1
    return "".join(out)


def reply_topic(kind: str, tenant: str) -> str:
    """The topic carrying `kind` replies (one of REPLY_KINDS) to `tenant`: jev.tenant.<slug>.<kind>.v1."""
    if kind not in REPLY_KINDS:
        raise ValueError(f"no reply topic of kind {kind!r}: choose one of {', '.join(REPLY_KINDS)}")
    return f"{REPLY_PREFIX}{slug(tenant)}.{kind}.v1"


def reply_topics(tenant: str) -> list[str]:
    """Every reply topic of `tenant`, in REPLY_KINDS order."""
    return [reply_topic(kind, tenant) for kind in REPLY_KINDS]


SIGNATURE_HEADER = "jev-tenant-sig"
MIN_KEY_BYTES = 16


def signature(key: bytes, raw: bytes) -> str:
    """What a producer holding `key` sends as its request's jev-tenant-sig header."""
    return hmac.new(key, b"jev-tenant-v1\x00" + raw, hashlib.sha256).hexdigest()


def load_keys(path: str) -> dict[str, bytes] | None:
    """JEV_TENANT_KEYS as {canonical tenant: key}; None when unset (any producer may name any tenant)."""
    if not path:
        return None
    import orjson

    try:
        data = orjson.loads(Path(path).read_bytes())
        if not isinstance(data, dict) or not all(isinstance(k, str) for k in data.values()):
            raise ValueError('expected a JSON object {"<tenant>": "<key>"}')
        keys = {canonical(tenant): key.encode() for tenant, key in data.items()}
    except (OSError, ValueError) as exc:
        raise SystemExit(f"JEV_TENANT_KEYS={path}: {exc}") from None
    short = sorted(t for t, k in keys.items() if len(k) < MIN_KEY_BYTES)
    if short:
        raise SystemExit(
            f"JEV_TENANT_KEYS={path}: the keys of {', '.join(short)} are shorter than {MIN_KEY_BYTES} "
            f"bytes: give each tenant a random key (e.g. `openssl rand -hex 32`)"
        )
    return keys


def unbound(keys: dict[str, bytes] | None, tenant: str, raw: bytes, headers) -> str:
    """Why this request may not spend as `tenant` ("" when it may: no keys configured, or its signature holds)."""
    if keys is None:
        return ""
    key = keys.get(tenant)
    if key is None:
        return f"tenant {tenant!r} has no producer key in JEV_TENANT_KEYS: add one, and give it to its producers"
    sent = [bytes(v or b"") for k, v in headers or () if k == SIGNATURE_HEADER]
    if not sent:
        return (
            f"the request has no {SIGNATURE_HEADER} header: its producer must sign each request with tenant "
            f"{tenant!r}'s key (hex HMAC-SHA256 of b'jev-tenant-v1\\0' + the message value)"
        )
    if not hmac.compare_digest(sent[-1], signature(key, raw).encode()):
        return (
            f"the {SIGNATURE_HEADER} header does not match this request under tenant {tenant!r}'s key: this "
            f"producer may not write for {tenant!r} (or the value changed after it was signed)"
        )
    return ""
