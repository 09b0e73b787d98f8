"""Ingest as a pure function: bytes → admitted Work, or a Rejection with a reason code."""

from __future__ import annotations

import time
from dataclasses import dataclass

from schemas.records import Rejection, Request, Work
from schemas.validate import CONTROL, Invalid, decode
from streams.core import tenants
from streams.core.deadletter import dead_letter
from streams.core.tenants import BadTenant, canonical
from streams.ingest.contracts import ContractError, check_request, fit_history
from streams.ingest.templates import Templates
from streams.output import chunks as stream_mod
from streams.output.chunks import StreamConfig
from streams.text import tokens
from streams.text.prompt import count_sections, measure_context


@dataclass(frozen=True)
class Admission:
    """What ingest checks a request against."""

    max_bytes: int
    default_model: str
    known_types: frozenset[str]
    templates: Templates | None = None
    stream_config: StreamConfig | None = None  # streamed answers: known question types and clients (stream.yaml)
    tenants: frozenset[str] | None = None  # the tenants admitted (streams.core.tenants.admitted); None = any valid name
    max_field_bytes: int | None = None  # the most bytes one string of a request may hold (JEV_MAX_FIELD_BYTES)
    tenant_keys: dict[str, bytes] | None = None  # producers' keys per tenant (JEV_TENANT_KEYS); None = unbound


METADATA = (
    "service",
    "decision_type",
    "kind",
    "business_line",
    "session_id",
    "user_id",
    "model",
    "business_event",
    "human_decision",
)  # stripped of control characters on the way in
# (the tenant is not: a control character in it is refused, streams.core.tenants; nor is the request id: stripped, the
# decision would carry another id than the request, so one holding a control character is refused, request_id_problem)


def admit(
    raw: bytes, policy: Admission, *, truncate: bool = True, now: float | None = None, headers=()
) -> Work | Rejection:
    """Decode, validate, check the producer may write for its tenant (`headers`: the message's, streams.core.tenants),
    render the template, count every section exactly, enforce the input contract (truncate the oldest history by
    tokens when `truncate`, else reject)."""
    now = time.time() if now is None else now
    request_id = ""
    try:
        request = decode(raw, Request, policy.max_bytes, clean=METADATA, max_field_bytes=policy.max_field_bytes)
        request_id = request.request_id
        if problem := request_id_problem(request_id):
            raise Invalid("wrong_value", problem)
        request = with_canonical_tenant(request)
        model = request.model or policy.default_model
        check(request, model, policy.known_types, policy.tenants)
        unbound = tenants.unbound(policy.tenant_keys, request.tenant, raw, headers)
        if unbound:
            raise Invalid("unauthenticated_tenant", unbound)
        check_stream(request, policy.stream_config or stream_mod.load())
        check_request(request)
        measured = measure_context(request, model)
        instruction, context, context_tokens = "", measured.text(), measured.tokens()
        if request.template:
            if policy.templates is None:
                raise ContractError("unknown_template", "templates are not loaded in this worker")
            rendered = policy.templates.render_request(request, model)
            instruction = rendered.instruction
            context = f"{rendered.text}\n\n{context}"
            context_tokens = tokens.count(context, model)
        if context_tokens > request.contracts.max_input_tokens:
            if not truncate or request.template:
                raise ContractError(
                    "over_contract",
                    f"context is {context_tokens} tokens; contracts.max_input_tokens "
                    f"is {request.contracts.max_input_tokens}: shorten history/state "
                    f"or raise the contract",
                )
            first = fit_history(measured)
            context, context_tokens = measured.text(first), measured.tokens(first)
        candidate_tokens = [tokens.count(c.text, model) for c in request.candidates]
        sections = count_sections(
            request,
            model,
            template=instruction,
            candidate_tokens=candidate_tokens,
            history_tokens=measured.history_tokens(),
        )
        return Work(
            request=request,
            admitted_at=now,
            model=model,
            context=context,
            context_tokens=context_tokens,
            sections=sections,
            candidate_tokens=candidate_tokens,
        )
    except Invalid as exc:
        return dead_letter(exc.reason, str(exc), "ingest", raw, request_id or exc.request_id, now)
    except ContractError as exc:
        return dead_letter(exc.reason, str(exc), "ingest", raw, request_id, now)
    except tokens.UnknownModel as exc:
        return dead_letter("unknown_model", str(exc), "ingest", raw, request_id, now)


def request_id_problem(request_id: str) -> str:
    """Why `request_id` cannot identify a request ("" when it can): a control character (a NUL, a newline) in it."""
    found = CONTROL.search(request_id)
    if found is None:
        return ""
    return (
        f"request_id holds U+{ord(found.group()):04X}, a control character, at position {found.start()}: send the id "
        f"without control characters (its decision, usage and redeliveries are matched by this exact id)"
    )


def with_canonical_tenant(request: Request) -> Request:
    """`request` under its tenant's one spelling (streams.core.tenants), or Invalid bad_tenant saying what is wrong."""
    if not request.tenant.strip():
        return request  # check() names the missing tenant
    try:
        tenant = canonical(request.tenant)
    except BadTenant as exc:
        raise Invalid("bad_tenant", str(exc)) from None
    return request if tenant == request.tenant else request.derive(tenant=tenant)


def check(request: Request, model: str, known_types: frozenset[str], tenants: frozenset[str] | None = None) -> None:
    if not request.request_id:
        raise Invalid("missing_field", "request_id: must be a non-empty string")
    if not request.tenant.strip():
        raise Invalid("missing_field", "tenant: must be a non-empty string naming the tenant the request spends for")
    if tenants is not None and request.tenant not in tenants:
        raise Invalid(
            "unknown_tenant",
            f"tenant {request.tenant!r} is not admitted: add it to JEV_TENANTS "
            f"(comma-separated), or set JEV_TENANTS=* to admit any tenant",
        )
    if known_types and request.decision_type not in known_types:
        raise Invalid(
            "unknown_decision_type",
            f"decision_type {request.decision_type!r} is not configured; known: {', '.join(sorted(known_types))}",
        )
    if request.kind not in ("decide", "generate"):
        raise Invalid("wrong_value", f"kind: {request.kind!r} must be 'decide' or 'generate'")
    ids = [c.id for c in request.candidates]
    if len(set(ids)) != len(ids):
        raise Invalid("wrong_value", "candidates: ids must be unique")
    tokens.encoding_name(model)


def check_stream(request: Request, config: StreamConfig) -> None:
    """A stream is asked by a generate request, of a configured client and question type."""
    if request.stream and (request.kind != "generate" or request.candidates):
        raise Invalid(
            "wrong_value",
            "stream: true needs kind 'generate' and no candidates (a ranking decision is one record, not a stream)",
        )
    try:
        if request.client:
            config.client(request.client)
        if request.question_type:
            config.canonical(request.question_type)
    except ValueError as exc:
        raise Invalid("wrong_value", str(exc)) from None
