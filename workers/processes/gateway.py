"""The HTTP gateway: OpenAI-compatible chat completions (plain and streamed as server-sent events), the model list, a
Jev-native decisions endpoint and a health check, in front of the same pipeline Kafka traffic reaches.

Every call goes through the client library (streams/runtime/client.py: one JevClient per tenant, made on first use)
onto the requests topic, so budgets, contracts, caches, distillation, cleanup and metering apply exactly as they do
to any producer; the gateway only translates. The tenant comes from the API key (a hash per key in a file re-read
when it changes, `jev gateway keys`), never from the body. Errors use OpenAI's shape,
{"error": {"message", "type", "param", "code"}}, with the pipeline's rejection reasons mapped to HTTP statuses.
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import json
import logging
import os
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiohttp import web

from schemas.records import Request
from streams.core import cancels
from streams.core.tenants import canonical
from streams.models import pool as pool_mod
from streams.models import registry
from streams.output.format import http_headers
from streams.runtime.client import JevClient, JevError, JevHeld, JevRejected, JevTimeout
from streams.runtime.control import send
from streams.security import signing

log = logging.getLogger("jev.gateway")

KEY_PREFIX = "jev-"
SAMPLING = {"temperature", "top_p", "frequency_penalty", "presence_penalty", "seed", "stop", "logit_bias", "store"}
JEV_FIELDS = {"decision_type", "session_id", "service", "business_line", "business_event", "question_type", "client"}
CHAT_FIELDS = {"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "n", "user"}
UNSUPPORTED = {"tools", "tool_choice", "functions", "function_call", "response_format", "logprobs", "top_logprobs"}
ROLES = {"system", "developer", "user", "assistant", "tool"}

# A rejection reason (streams/core/deadletter.py, ingest) -> HTTP status, OpenAI error type, error code.
REJECTED = {
    "rate_limited": (429, "rate_limit_error", "rate_limit_exceeded"),
    "over_budget": (429, "insufficient_quota", "insufficient_quota"),
    "unknown_model": (404, "invalid_request_error", "model_not_found"),
    "over_contract": (400, "invalid_request_error", "context_length_exceeded"),
    "unknown_tenant": (403, "permission_error", "unknown_tenant"),
    "bad_tenant": (403, "permission_error", "bad_tenant"),
    "unauthenticated_tenant": (403, "permission_error", "unauthenticated_tenant"),
    "duplicate_request_id": (409, "invalid_request_error", "duplicate_request_id"),
    "internal_error": (500, "server_error", "internal_error"),
}
# Request fields a rejection names -> the parameter of the HTTP body that carried them.
CHAT_PARAMS = {"state": "messages", "history": "messages", "contracts": "max_tokens", "max_output_tokens": "max_tokens"}


class ApiError(Exception):
    """An answer in OpenAI's error shape."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param=None, code=None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers: dict[str, str] = {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status, headers=self.headers, dumps=_dumps)


def _dumps(obj) -> str:
    return orjson.dumps(obj).decode()


class Keys:
    """API keys → tenants. The file holds each key's sha256 and its tenant, never the key (keys are 256 random bits,
    so a plain hash cannot be reversed); it is re-read whenever it changes, so `jev gateway keys add` and `revoke`
    apply to a running gateway."""

    def __init__(self, path: Path):
        self.path = path
        self.stamp: tuple[int, int] | None = None
        self.entries: dict[str, dict] = {}

    @staticmethod
    def digest(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    def load(self) -> dict[str, dict]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self.stamp, self.entries = None, {}
            return self.entries
        if (st.st_mtime_ns, st.st_size) != self.stamp:
            self.entries = json.loads(self.path.read_text() or "{}")
            self.stamp = (st.st_mtime_ns, st.st_size)
        return self.entries

    def tenant(self, key: str) -> str | None:
        entry = self.load().get(self.digest(key))
        return entry["tenant"] if entry else None

    def save(self, entries: dict[str, dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries, indent=1, ensure_ascii=False))
        tmp.chmod(0o600)
        os.replace(tmp, self.path)

    def add(self, tenant: str) -> tuple[str, str]:
        """A new key for `tenant` (its one spelling, streams.core.tenants): (key id, key). Only the hash is kept."""
        tenant = canonical(tenant)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        digest = self.digest(key)
        self.save({**self.load(), digest: {"tenant": tenant, "id": digest[:12], "created": int(time.time())}})
        return digest[:12], key

    def revoke(self, key_or_id: str) -> list[str]:
        """Revokes a key given itself or its id (the first 12 hex digits of its hash); the ids revoked."""
        entries = self.load()
        gone = [d for d in entries if d == self.digest(key_or_id) or (len(key_or_id) >= 8 and d.startswith(key_or_id))]
        if gone:
            self.save({d: e for d, e in entries.items() if d not in gone})
        return [d[:12] for d in gone]

    def listed(self) -> list[dict]:
        return sorted(self.load().values(), key=lambda e: (e["tenant"], e["created"]))


def keys_for(settings) -> Keys:
    return Keys(Path(settings.gateway_keys_file or Path(settings.data_dir) / "gateway_keys.json"))


def generator_models(settings) -> list[pool_mod.ModelSpec]:
    """The pool entries that answer generate requests (JEV_GENERATOR: one name, several for a router, or auto)."""
    pool = pool_mod.load(settings.models)
    names = [n.strip() for n in settings.generator.split(",") if n.strip()]
    if names == ["auto"]:
        names = ["smollm2" if registry.models.available("smollm2") else "extractive"]
    return [registry.resolve(n, pool, "generator") for n in names]


@dataclass
class Gateway:
    settings: object
    keys: Keys
    models: list[pool_mod.ModelSpec]
    clients: dict[str, JevClient]
    lock: asyncio.Lock
    cancelling: set[asyncio.Task] = field(default_factory=set)  # cancel records on their way

    async def client(self, tenant: str) -> JevClient:
        """The tenant's client, started on first use (one start at a time; known tenants never wait for it)."""
        if tenant in self.clients:
            return self.clients[tenant]
        async with self.lock:
            if tenant not in self.clients:
                client = JevClient(tenant, settings=self.settings, service="gateway")
                await client.start()
                self.clients[tenant] = client
            return self.clients[tenant]

    def cancel(self, client: JevClient, request_id: str) -> None:
        """Stop generating the answer of a caller that went away: a signed cancel control record naming the tenant
        (the key's, so no tenant stops another's request) and the request id (streams.core.cancels), on the
        tenant's client's producer. Sent in the background: the handler that asks is being cancelled itself."""
        record = cancels.record(client.tenant, request_id)
        task = asyncio.get_running_loop().create_task(send(client.producer, record))
        self.cancelling.add(task)
        task.add_done_callback(self.cancelled)

    def cancelled(self, task: asyncio.Task) -> None:
        self.cancelling.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("could not publish a cancel (%s): that answer is generated to its end", task.exception())

    async def close(self, _app=None) -> None:
        if self.cancelling:
            await asyncio.wait(self.cancelling, timeout=10)
        for client in self.clients.values():
            await client.stop()
        self.clients.clear()


GATEWAY = web.AppKey("gateway", Gateway)


def tenant_of(request: web.Request, gw: Gateway) -> str:
    auth = request.headers.get("Authorization", "")
    scheme, _, key = auth.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError(
            401,
            "Missing API key: send `Authorization: Bearer <key>` "
            "(create one with `jev gateway keys add --tenant NAME`).",
            code="missing_api_key",
        )
    tenant = gw.keys.tenant(key.strip())
    if tenant is None:
        raise ApiError(401, "Incorrect API key provided (unknown or revoked).", code="invalid_api_key")
    return tenant


async def json_body(request: web.Request) -> dict:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:  # aiohttp's own answer is plain text the OpenAI SDK cannot read
        limit = request.app[GATEWAY].settings.max_record_bytes
        raise ApiError(
            413,
            f"The body is over {limit} bytes, the most one request may carry (JEV_MAX_RECORD_BYTES): send less "
            "history or reference text, or have the operator raise JEV_MAX_RECORD_BYTES for every stage.",
            code="request_too_large",
        ) from None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"The body is not valid JSON: {exc}", code="bad_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The body must be a JSON object.", code="bad_json")
    if "tenant" in body:
        raise ApiError(
            400, "`tenant` comes from the API key, never from the body: remove it.", param="tenant", code="wrong_value"
        )
    return body


def text_of(content, where: str) -> str:
    """A message's content: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ApiError(400, f"{where}.content must be a string or a list of text parts.", param=f"{where}.content")


def positive(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ApiError(400, f"{name} must be a positive integer, got {value!r}.", param=name, code="wrong_value")
    return value


def chat_call(body: dict, models: list[pool_mod.ModelSpec]) -> tuple[str, list[dict], dict]:
    """The chat body as a generate request: (the last user turn, the earlier turns, the request's other fields)."""
    unknown = set(body) - CHAT_FIELDS - SAMPLING - JEV_FIELDS - UNSUPPORTED - {"metadata", "request_id"}
    refused = sorted(set(body) & UNSUPPORTED) + sorted(unknown)
    if refused:
        raise ApiError(400, f"{refused[0]} is not supported by Jev's gateway; remove it.", param=refused[0])
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model is required: one of GET /v1/models.", param="model", code="missing_field")
    if model not in {m.name for m in models}:
        raise ApiError(
            404,
            f"The model `{model}` does not exist here; GET /v1/models lists {', '.join(m.name for m in models)}.",
            param="model",
            code="model_not_found",
        )
    if body.get("n", 1) != 1:
        raise ApiError(400, "n must be 1: Jev answers once per request.", param="n", code="wrong_value")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list.", param="messages", code="missing_field")
    turns = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ApiError(
                400, f"messages[{i}].role must be one of {', '.join(sorted(ROLES))}.", param=f"messages[{i}].role"
            )
        turns.append({"role": m["role"], "content": text_of(m.get("content"), f"messages[{i}]")})
    if turns[-1]["role"] != "user":
        raise ApiError(400, "The last message must be the user's turn.", param=f"messages[{len(turns) - 1}].role")
    for flag in ("stream",):
        if not isinstance(body.get(flag, False), bool):
            raise ApiError(400, f"{flag} must be true or false.", param=flag, code="wrong_type")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object.", param="stream_options", code="wrong_type")
    fields: dict = {k: body[k] for k in JEV_FIELDS if k in body}
    limit = positive(body, "max_completion_tokens") or positive(body, "max_tokens")
    if limit:
        fields["contracts"] = {"max_output_tokens": limit}
    if isinstance(body.get("user"), str):
        fields["user_id"] = body["user"]
    return turns[-1]["content"], turns[:-1], fields


def retry_after(rejection: JevRejected) -> int:
    """Seconds before the tenant may send again: the rejection's own figure (rate_limited), else, for a budget,
    until its period (UTC day or month, named in the detail) starts again."""
    if rejection.retry_after:
        return max(1, round(rejection.retry_after))
    now = time.gmtime()
    if "@month" in rejection.detail:
        days = calendar.monthrange(now.tm_year, now.tm_mon)[1]
        end = calendar.timegm((now.tm_year, now.tm_mon, days, 0, 0, 0)) + 86400
    else:
        end = calendar.timegm((now.tm_year, now.tm_mon, now.tm_mday, 0, 0, 0)) + 86400
    return max(1, int(end - time.time()))


def rejected(exc: JevRejected, params: dict[str, str]) -> ApiError:
    """The pipeline's rejection as an HTTP error: its reason is the code, the parameter is read off its detail."""
    status, type_, code = REJECTED.get(exc.reason, (400, "invalid_request_error", exc.reason))
    field = re.match(r"([A-Za-z_][\w.\[\]]*)[: ]", exc.detail or "")
    head = re.split(r"[.\[]", field.group(1))[0] if field else ""
    param = None
    if code == "model_not_found":
        param = "model"
    elif head in Request.__annotations__:
        param = params.get(head, field.group(1))
    error = ApiError(
        status, f"Jev refused the request ({exc.reason}): {exc.detail}", type=type_, param=param, code=code
    )
    if status == 429:
        error.headers["Retry-After"] = str(retry_after(exc))
    return error


def fallback_error(decision) -> ApiError | None:
    """A decision without an answer (a generate request that fell back): 504 when time ran out, else 503."""
    if decision.tier != "fallback" or decision.text:
        return None
    reason = next((c.split(":")[1] for c in decision.chain if c.startswith("fallback:")), "fallback")
    status = 504 if reason in ("deadline", "timeout") else 503
    return ApiError(
        status,
        f"Jev could not generate an answer and fell back ({reason}): {decision.error or 'no answer'}",
        type="server_error",
        code=reason,
    )


def usage(decision) -> dict:
    return {
        "prompt_tokens": decision.input_tokens,
        "completion_tokens": decision.output_tokens,
        "total_tokens": decision.input_tokens + decision.output_tokens,
        "prompt_tokens_details": {"cached_tokens": decision.cache_read_tokens},
    }


def jev_fields(decision) -> dict:
    return {"request_id": decision.request_id, "tier": decision.tier, "chain": decision.chain, "cost": decision.cost}


def request_id(request: web.Request, body: dict) -> str:
    """The caller's Idempotency-Key (a retry is answered with the first decision), else a new id."""
    given = request.headers.get("Idempotency-Key") or body.get("request_id")
    if given is not None and not (isinstance(given, str) and 0 < len(given) <= 200):
        raise ApiError(400, "request_id must be a string of 1 to 200 characters.", param="request_id")
    return given or f"gw-{uuid.uuid4().hex}"


def as_api_error(exc: Exception, params: dict[str, str]) -> ApiError:
    """`params`: the request fields a rejection may name -> the body parameter that carried them."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, JevRejected):
        return rejected(exc, params)
    if isinstance(exc, JevTimeout):
        return ApiError(504, f"No decision in time: {exc}", type="server_error", code="timeout")
    return ApiError(502, f"The pipeline did not answer: {exc}", type="server_error", code="jev_error")


def handler(fn):
    async def run(request: web.Request) -> web.StreamResponse:
        try:
            return await fn(request, request.app[GATEWAY])
        except (ApiError, JevError) as exc:
            return as_api_error(exc, CHAT_PARAMS if request.path.endswith("/completions") else {}).response()

    return run


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def models(request: web.Request, gw: Gateway) -> web.Response:
    tenant_of(request, gw)
    data = [
        {"id": m.name, "object": "model", "created": 0, "owned_by": "jev", "channel": m.channel, "engine": m.engine}
        for m in gw.models
    ]
    return web.json_response({"object": "list", "data": data})


async def chat(request: web.Request, gw: Gateway) -> web.StreamResponse:
    tenant = tenant_of(request, gw)
    body = await json_body(request)
    prompt, history, fields = chat_call(body, gw.models)
    rid = request_id(request, body)
    client = await gw.client(tenant)
    timeout = gw.settings.gateway_timeout_s
    if history:
        fields["history"] = history
    decision_type = fields.pop("decision_type", "customer_service")
    if not body.get("stream"):
        held = False
        try:
            decision = await client.generate(
                prompt, decision_type=decision_type, request_id=rid, timeout=timeout, **fields
            )
        except JevHeld as exc:  # held for human review: OpenAI's content_filter, nothing of it served
            decision, held = exc.decision, True
        if error := fallback_error(decision):
            raise error
        limit = fields.get("contracts", {}).get("max_output_tokens")
        finish = "content_filter" if held else "length" if limit and decision.output_tokens >= limit else "stop"
        reply = {
            "id": f"chatcmpl-{rid}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "" if held else decision.text},
                    "finish_reason": finish,
                }
            ],
            "usage": usage(decision),
            "jev": jev_fields(decision),
        }
        return web.json_response(reply, headers=http_headers(decision), dumps=_dumps)
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return await stream(request, gw, client, prompt, body["model"], rid, decision_type, include_usage, fields, timeout)


async def stream(request, gw, client, prompt, model, rid, decision_type, include_usage, fields, timeout):
    """The answer as server-sent events, each chunk sent as the pipeline releases it (its token bucket paces them).
    Errors before the first chunk are plain HTTP errors; after it, an error event. A caller that goes away ends the
    wait here (the gateway runs with handler cancellation) and cancels the answer: the scoring worker stops
    generating it and meters what was generated (Gateway.cancel)."""
    replies = client.stream(prompt, decision_type=decision_type, request_id=rid, timeout=timeout, **fields)
    base = {"id": f"chatcmpl-{rid}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    response = None

    async def send(obj) -> None:
        await response.write(b"data: " + orjson.dumps(obj) + b"\n\n")

    async def open_events() -> web.StreamResponse:
        events = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Request-Id": rid}
        )
        await events.prepare(request)
        return events

    finish = "stop"
    try:
        try:
            async for chunk in replies:
                delta = {"content": chunk.text}
                if response is None:
                    response = await open_events()
                    delta["role"] = "assistant"
                await send({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            decision = replies.decision
        except JevHeld as exc:  # held for human review: the rest is withheld, as OpenAI's content_filter
            decision, finish = exc.decision, "content_filter"
        if response is None:  # no chunk at all: a fallback is an error, anything else one delta
            if error := fallback_error(decision):
                raise error
            response = await open_events()
            text = "" if finish == "content_filter" else decision.text
            await send({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]})
        done = {"index": 0, "delta": {}, "finish_reason": finish}
        await send({**base, "choices": [done], "jev": jev_fields(decision)})
        if include_usage:
            await send({**base, "choices": [], "usage": usage(decision)})
        await response.write(b"data: [DONE]\n\n")
    except (JevError, ApiError) as exc:
        if response is None:
            raise
        await send(as_api_error(exc, CHAT_PARAMS).body())
        await response.write(b"data: [DONE]\n\n")
    except (ConnectionResetError, asyncio.CancelledError) as gone:  # the caller went away mid-stream
        if replies.decision is None:
            gw.cancel(client, rid)
        if isinstance(gone, asyncio.CancelledError):
            raise
        return response
    finally:
        await replies.aclose()
    await response.write_eof()
    return response


async def decisions(request: web.Request, gw: Gateway) -> web.Response:
    """Jev-native: state and candidates in; the action, its ranking, the tier that answered and the tokens out."""
    tenant = tenant_of(request, gw)
    body = await json_body(request)
    if "state" not in body:
        raise ApiError(400, "state is required: the situation, as text or a JSON object.", param="state")
    if not isinstance(body.get("decision_type"), str):
        raise ApiError(400, "decision_type is required: a configured decision type.", param="decision_type")
    candidates = body.get("candidates", [])
    if not isinstance(candidates, list):
        raise ApiError(400, "candidates must be a list of {id, text}.", param="candidates")
    for i, c in enumerate(candidates):
        if not (isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("text"), str)):
            raise ApiError(400, f"candidates[{i}] must be an object with string id and text.", param=f"candidates[{i}]")
    fields = {k: v for k, v in body.items() if k not in ("state", "candidates", "decision_type", "request_id")}
    client = await gw.client(tenant)
    held = False
    try:
        decision = await client.decide(
            body["state"],
            candidates,
            decision_type=body["decision_type"],
            request_id=request_id(request, body),
            timeout=gw.settings.gateway_timeout_s,
            **fields,
        )
    except JevHeld as exc:  # held for human review: its action is not served
        decision, held = exc.decision, True
    reply = {
        "request_id": decision.request_id,
        "action_id": "" if held else decision.action_id,
        "held_for_review": held,
        "ranking": [{"id": r.id, "score": r.score} for r in decision.ranking],
        "tier": decision.tier,
        "confidence": decision.confidence,
        "chain": decision.chain,
        "text": decision.text,
        "usage": {
            "input_tokens": decision.input_tokens,
            "cache_read_tokens": decision.cache_read_tokens,
            "output_tokens": decision.output_tokens,
            "total_tokens": decision.input_tokens + decision.output_tokens,
        },
        "cost": decision.cost,
        "latency_ms": decision.latency_ms,
        "error": decision.error,
    }
    return web.json_response(reply, headers=http_headers(decision), dumps=_dumps)


def app(settings) -> web.Application:
    signing.configure(settings)  # the cancels it publishes are signed control records
    gw = Gateway(settings, keys_for(settings), generator_models(settings), {}, asyncio.Lock())
    application = web.Application(client_max_size=settings.max_record_bytes)
    application[GATEWAY] = gw
    application.on_cleanup.append(gw.close)
    application.router.add_get("/health", health)
    application.router.add_get("/v1/models", handler(models))
    application.router.add_post("/v1/chat/completions", handler(chat))
    application.router.add_post("/v1/decisions", handler(decisions))
    return application


async def start(settings, *, host: str = "127.0.0.1", port: int = 8080) -> web.AppRunner:
    """Serves the gateway on host:port until the runner's cleanup(); a caller that disconnects cancels its wait."""
    runner = web.AppRunner(app(settings), handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
