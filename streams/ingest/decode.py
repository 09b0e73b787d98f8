"""Ingest as a pure function: bytes → admitted Work, or a Rejection with a reason code."""
from __future__ import annotations

import time

from schemas.records import Rejection, Request, Work
from schemas.validate import Invalid, decode
from streams import tokens
from streams.ingest.prompt import count_sections, render_context


def admit(raw: bytes, *, max_bytes: int, default_model: str, known_types: set[str],
          now: float | None = None) -> Work | Rejection:
    now = time.time() if now is None else now
    try:
        request = decode(raw, Request, max_bytes)
        model = request.model or default_model
        check(request, model, known_types)
        context = render_context(request)
        work = Work(request=request, admitted_at=now, model=model, sections=count_sections(request, model),
                    context=context, context_tokens=tokens.count(context, model),
                    candidate_tokens=[tokens.count(c.text, model) for c in request.candidates])
    except Invalid as exc:
        return reject(raw, exc.reason, str(exc), "ingest", now)
    except tokens.UnknownModel as exc:
        return reject(raw, "unknown_model", str(exc), "ingest", now)
    if work.context_tokens > request.contracts.max_input_tokens:
        return reject(raw, "over_contract", f"context is {work.context_tokens} tokens; contracts.max_input_tokens "
                      f"is {request.contracts.max_input_tokens}: shorten history/state or raise the contract",
                      "ingest", now, request.request_id)
    return work


def check(request: Request, model: str, known_types: set[str]) -> None:
    if not request.request_id:
        raise Invalid("missing_field", "request_id: must be a non-empty string")
    if known_types and request.decision_type not in known_types:
        raise Invalid("unknown_decision_type", f"decision_type {request.decision_type!r} is not configured; "
                                               f"known: {', '.join(sorted(known_types))}")
    if request.kind not in ("decide", "generate"):
        raise Invalid("wrong_value", f"kind: {request.kind!r} must be 'decide' or 'generate'")
    ids = [c.id for c in request.candidates]
    if len(set(ids)) != len(ids):
        raise Invalid("wrong_value", "candidates: ids must be unique")
    tokens.encoding_name(model)


def reject(raw: bytes, reason: str, detail: str, stage: str, now: float, request_id: str = "") -> Rejection:
    return Rejection(reason=reason, detail=detail, stage=stage, original=raw.decode("latin-1"), ts=now,
                     request_id=request_id)
