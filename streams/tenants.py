"""Tenant identity: one spelling per tenant, and keys that never let two (tenant, request) pairs meet.

A tenant name is what budgets, idempotency, usage rows and reports are keyed by, so two spellings of one name
would be two tenants: a hard budget on `wayne` evaded by `Wayne`, `wayne ` or a Cyrillic `а`. Every name that
enters (a request's tenant, JEV_TENANTS) goes through `canonical`:

1. NFKC: compatibility forms become their plain letters (full-width `ｗａｙｎｅ` is `wayne`) and a letter with
   a combining accent becomes one character;
2. surrounding white space trimmed;
3. case folded (`Wayne` is `wayne`): a tenant is never told apart from another by case alone, and folding
   rather than rejecting keeps upstream producers that capitalise working;
4. checked against the tenant character set: ASCII letters and digits, `.`, `_`, `-`, and CJK ideographs
   (U+3400–U+4DBF, U+4E00–U+9FFF), 1 to 64 characters, starting with a letter, digit or ideograph. Anything
   else is refused as `bad_tenant`, naming the character: control, zero-width and bidi characters (U+200B,
   U+202E, …) that hide in a name, letters of other scripts that look like Latin ones (Cyrillic `а`), accented
   letters, spaces inside a name and `/`.

Keys built from a tenant and a request id (`request_key`) prefix each part with its length, so `acme/coll` + `r1`
and `acme` + `coll/r1` stay apart whatever characters a request id holds.
"""
from __future__ import annotations

import re
import unicodedata

MAX_LENGTH = 64
ALLOWED = re.compile(r"[a-z0-9\u3400-\u4dbf\u4e00-\u9fff][a-z0-9._\-\u3400-\u4dbf\u4e00-\u9fff]*")
HIDDEN = {"Cc": "a control character", "Cf": "an invisible format character (zero-width or bidi control)",
          "Zl": "a line separator", "Zp": "a paragraph separator", "Mn": "a combining mark", "Me": "a combining mark"}
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
        raise BadTenant(f"tenant {name!r} holds {described(bad)}, outside the tenant character set ({CHARSET}): "
                        f"use the tenant's plain name")
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
