"""The OpenAI-compatible HTTP engine (engine `openai`): any server speaking the OpenAI API (vLLM, llama-server,
SGLang, TGI, Ollama, a hosted provider), through async httpx on one background event loop.

generate: /chat/completions, streamed with usage. decide: every candidate of one decision in ONE call, the context
sent once (`options.decide`: completions, chat, rerank or generative_scoring). Faults go through streams/models/http.py,
then `ModelUnavailable` and the engine's fallback. Two counts per call: Jev's (counted before the call, for the
budget) and the server's `usage`, which settles the bill; an answer's output is the server's count where it sent one.
A completions decision also claims the prompt tokens the server's prefix cache should serve (streams/models/prefix.py)
as its cache reads, which the server's cached_tokens confirms or not.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import math
import queue
import threading
import time
from collections.abc import Callable

import httpx

from streams.models.http import Server, loop, send, server, usage_of
from streams.models.prefix import PrefixCache
from streams.models.protocol import Generated, ModelUnavailable, Scored, Streaming, Usage
from streams.text import tokens

LETTERS = [chr(ord("A") + i) for i in range(26)]
FLOOR = -30.0  # log-probability of a label the server did not list among its top logprobs
DEFAULTS = {
    "timeout_s": 30.0,
    "retries": 4,
    "backoff_s": 0.1,
    "max_concurrency": 8,
    "breaker_failures": 5,
    "breaker_cooldown_s": 5.0,
    "decide": "completions",
    "top_logprobs": 20,
    "label_token_ids": [],
    "cache_block_tokens": 16,  # the server's prefix-cache block (vLLM's --block-size, 16 by default)
    "cache_blocks": 4096,  # how many blocks its prefix cache holds: older ones are not claimed
}
JEV_STANDARD = "cl100k_base"  # Jev's count where the pool names no tokenizer for a model


def answer_confidence(body: dict) -> float | None:
    """The mean probability of an answer's tokens from its chat logprobs; None when the server sent none."""
    try:
        values = [float(t["logprob"]) for t in body["choices"][0]["logprobs"]["content"]]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return round(math.exp(sum(values) / len(values)), 4) if values else None


def label_scores(top: object, labels: list[str]) -> list[float]:
    """Each label's log-probability from a top-logprobs entry: the legacy completions form {token: logprob} or the
    chat form [{token, logprob}]. A token counts for a label when it is the label with spaces, dots or
    parentheses around it; a label not listed gets FLOOR."""
    pairs = (
        top.items()
        if isinstance(top, dict)
        else ((t.get("token", ""), t.get("logprob")) for t in top if isinstance(t, dict))
        if isinstance(top, list)
        else ()
    )
    best = dict.fromkeys(labels, FLOOR)
    for token, logprob in pairs:
        label = str(token).strip().strip(".():").upper()
        if label in best and isinstance(logprob, (int, float)) and math.isfinite(logprob):
            best[label] = max(best[label], float(logprob))
    return [best[label] for label in labels]


def choice_prompt(context: str, candidates: list[str]) -> str:
    """The context once, then the candidates under letters, then the question: one call scores them all."""
    listed = "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, candidates))
    return f"{context}\n\nOptions:\n{listed}\n\nThe best option is the letter"


class OpenAIEngine:
    """Scorer and generator over an OpenAI-compatible server (see the module docstring)."""

    label = "llm"
    temperature = 1.0  # label log-probabilities are in nats
    takes_deadlines = True  # score_many(items, deadlines): retries stay inside each decision's deadline
    remote = True  # its calls are billed by a server: a call without `usage` is metered on Jev's count

    def __init__(self, spec):
        self.spec = spec
        self.name = self.model = spec.name  # usage rows and prices go under the pool entry's name
        self.served_name = spec.model  # the server's name for it; empty: the first model the server lists
        self.base_url = spec.base_url.rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"model {spec.name!r} (engine openai): base_url must be an http(s) URL ending in /v1, "
                f"e.g. http://127.0.0.1:8000/v1; got {spec.base_url!r}"
            )
        self.options = {**DEFAULTS, **(spec.options or {})}
        if self.options["decide"] not in ("completions", "chat", "rerank", "generative_scoring"):
            raise ValueError(
                f"model {spec.name!r}: options.decide must be completions, chat, rerank or "
                f"generative_scoring, not {self.options['decide']!r}"
            )
        self.counting = spec.tokenizer or self.known_tokenizer()
        self.loop = loop()

    def known_tokenizer(self) -> str:
        try:
            return tokens.encoding_name(self.spec.model or self.spec.name)
        except tokens.UnknownModel:
            return JEV_STANDARD

    def count(self, text: str) -> int:
        """Jev's count of `text`: the pool's tokenizer for this model (Jev's standard one when it names none)."""
        return len(tokens.encoding(self.counting).encode_ordinary(text)) if text else 0

    def claim(self, srv: Server, prompt: str) -> tuple[int, int, Callable[[], None]]:
        """Jev's count of a prompt about to be sent, the part of it the server's prefix cache should serve, and what
        to call if the server refused it or could not be reached (its blocks are not in the server's cache)."""
        if srv.sent is None:
            srv.sent = PrefixCache(int(self.options["cache_block_tokens"]), int(self.options["cache_blocks"]))
        ids = tokens.encoding(self.counting).encode_ordinary(prompt)
        cached, added = srv.sent.claim(ids)
        return len(ids), cached, functools.partial(srv.sent.forget, added)

    def count_chat(self, prompt: str) -> int:
        """Jev's count of a chat call's prompt: the message and what the model's chat template adds around it."""
        return self.count(prompt) + tokens.chat_framing(self.counting)

    def count_output(self, text: str, finish_reason: object, usage: Usage | None) -> int:
        """Jev's count of an answer's output: the tokens the server generated, as it counted them in this call (its
        usage's completion tokens, the last count a stream carried). The text cannot tell: re-tokenized, even in the
        model's own vocabulary, a Chinese answer cut at its length reads short (llama-server's SmolLM2: 47 of 48, 158
        of 160: the byte tokens of a character left unfinished are never sent as text), and llama-server's stream
        holds a character's byte tokens back until it is whole, so neither its per-chunk token ids nor its logprobs
        list them all (27 entries for 48 tokens). A server that sent no count: the text in the model's tokenizer, and
        the end-of-generation token when the model ended the answer itself (finish_reason `stop`), a token it
        generated and bills that has no text."""
        if usage is not None and usage.completion_tokens > 0:
            return usage.completion_tokens
        return self.count(text) + (finish_reason == "stop")

    # --- HTTP, on the engine loop -------------------------------------------------------------------------

    def headers(self) -> dict:
        key = self.spec.api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def served(self, srv: Server, deadline: float) -> str:
        """The model name to send: the pool's, else the first the server lists at /models (asked once)."""
        if not self.served_name:
            body = await self.request(srv, "GET", "models", None, deadline)
            try:
                self.served_name = str(body["data"][0]["id"])
            except (KeyError, IndexError, TypeError):
                raise ModelUnavailable(
                    f"{self.base_url}/models lists no model; name it as `model:` in the pool"
                ) from None
        return self.served_name

    async def request(self, srv: Server, method: str, path: str, payload: dict | None, deadline: float) -> dict:
        """One JSON call with retries inside `deadline` (epoch seconds) and the server's circuit."""
        response = await send(srv, method, path, payload, self.headers(), deadline, self.options)
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            srv.breaker.failure(time.time())
            raise ModelUnavailable(f"{self.base_url}/{path}: malformed response (not a JSON object)")
        return body

    # --- decide -------------------------------------------------------------------------------------------

    def score(self, context: str, candidates: list[str]) -> Scored:
        result = self.score_many([(context, candidates)])[0]
        if isinstance(result, ModelUnavailable):
            raise result
        return result

    def score_many(
        self, items: list[tuple[str, list[str]]], deadlines: list[float] | None = None
    ) -> list[Scored | ModelUnavailable]:
        """Each decision in one call (more than 26 candidates: one call per 26), all of them concurrently; a
        decision whose call failed gets its ModelUnavailable in place of a Scored."""
        deadlines = deadlines or [0.0] * len(items)

        async def all_of():
            srv = server(self.base_url, self.options)
            return await asyncio.gather(
                *(
                    self.decide(srv, context, candidates, until)
                    for (context, candidates), until in zip(items, deadlines)
                ),
                return_exceptions=True,
            )

        results = self.loop.run(all_of())
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, ModelUnavailable):
                raise result
        return results

    async def decide(self, srv: Server, context: str, candidates: list[str], deadline: float) -> Scored:
        model = await self.served(srv, deadline)
        total = Scored([])
        for start in range(0, len(candidates), len(LETTERS)):
            part = await getattr(self, self.options["decide"])(
                srv, model, context, candidates[start : start + len(LETTERS)], deadline
            )
            total.scores += part.scores
            total.input_tokens += part.input_tokens
            total.cache_read_tokens += part.cache_read_tokens
            total.output_tokens += part.output_tokens
            total.calls += 1
            if part.server is not None:
                total.server = part.server if total.server is None else total.server + part.server
        return total

    async def completions(self, srv, model, context, candidates, deadline) -> Scored:
        prompt = choice_prompt(context, candidates)
        counted, cached, failed = self.claim(srv, prompt)
        try:
            body = await self.request(
                srv,
                "POST",
                "completions",
                {
                    "model": model,
                    "prompt": prompt,
                    "max_tokens": 1,
                    "temperature": 0.0,
                    "logprobs": self.options["top_logprobs"],
                },
                deadline,
            )
        except ModelUnavailable as exc:
            if exc.reason != "deadline":  # refused or unreachable; a call whose time ran out most likely reached it
                failed()
            raise
        try:  # the legacy form (vLLM, llama-cpp-python) or the per-token form (llama.cpp's own llama-server)
            logprobs = body["choices"][0]["logprobs"]
            top = logprobs["top_logprobs"][0] if "top_logprobs" in logprobs else logprobs["content"][0]["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise ModelUnavailable(f"{self.base_url}/completions: malformed response (no top_logprobs)") from None
        return Scored(label_scores(top, LETTERS[: len(candidates)]), counted, cached, 1, usage_of(body))

    async def chat(self, srv, model, context, candidates, deadline) -> Scored:
        prompt = choice_prompt(context, candidates) + " (answer with the letter only)."
        body = await self.request(
            srv,
            "POST",
            "chat/completions",
            {
                "model": model,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 1,
                "temperature": 0.0,
                "logprobs": True,
                "top_logprobs": self.options["top_logprobs"],
            },
            deadline,
        )
        try:
            top = body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise ModelUnavailable(f"{self.base_url}/chat/completions: malformed response (no logprobs)") from None
        return Scored(label_scores(top, LETTERS[: len(candidates)]), self.count_chat(prompt), 0, 1, usage_of(body))

    async def rerank(self, srv, model, context, candidates, deadline) -> Scored:
        body = await self.request(
            srv, "POST", "rerank", {"model": model, "query": context, "documents": candidates}, deadline
        )
        scores = [FLOOR] * len(candidates)
        try:
            for row in body["results"]:
                scores[int(row["index"])] = float(row["relevance_score"])
        except (KeyError, IndexError, TypeError, ValueError):
            raise ModelUnavailable(f"{self.base_url}/rerank: malformed response") from None
        return Scored(scores, self.count(context) + sum(map(self.count, candidates)), 0, 0, usage_of(body))

    async def generative_scoring(self, srv, model, context, candidates, deadline) -> Scored:
        yes, no = (self.options["label_token_ids"] + [None, None])[:2]
        if yes is None or no is None:
            raise ModelUnavailable(
                f"model {self.name!r}: generative_scoring needs options.label_token_ids "
                "[yes_id, no_id] in the model's tokenizer"
            )
        query = f"{context}\nDoes this candidate fit? "
        body = await self.request(
            srv,
            "POST",
            "generative-scores",
            {"model": model, "query": query, "items": candidates, "label_token_ids": [yes, no], "apply_softmax": False},
            deadline,
        )
        scores = [FLOOR] * len(candidates)
        try:
            for row in body["results"]:
                probs = row["token_probs"]
                scores[int(row["index"])] = math.log(max(float(probs[str(yes)]), 1e-12)) - math.log(
                    max(float(probs[str(no)]), 1e-12)
                )
        except (KeyError, IndexError, TypeError, ValueError):
            raise ModelUnavailable(f"{self.base_url}/generative-scores: malformed response") from None
        return Scored(
            scores,
            self.count(query) * len(candidates) + sum(map(self.count, candidates)),
            0,
            len(candidates),
            usage_of(body),
        )

    # --- generate -----------------------------------------------------------------------------------------

    def messages(self, prompt: str) -> list[dict]:
        return [{"role": "user", "content": prompt}]

    def generate(self, prompt: str, max_tokens: int, deadline: float = 0.0) -> Generated:
        started = time.perf_counter()

        async def call():
            srv = server(self.base_url, self.options)
            model = await self.served(srv, deadline)
            return await self.request(
                srv,
                "POST",
                "chat/completions",
                {
                    "model": model,
                    "messages": self.messages(prompt),
                    "max_tokens": max_tokens,
                    "temperature": 0.0,
                    "logprobs": True,
                },
                deadline,
            )

        body = self.loop.run(call())
        try:
            choice = body["choices"][0]
            text = choice["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise ModelUnavailable(f"{self.base_url}/chat/completions: malformed response (no message)") from None
        usage = usage_of(body)
        return Generated(
            text.strip(),
            self.count_chat(prompt),
            self.count_output(text, choice.get("finish_reason"), usage),
            self.model,
            self.label,
            (time.perf_counter() - started) * 1000,
            usage,
            answer_confidence(body),
        )

    def stream(self, prompt: str, max_tokens: int, deadline: float = 0.0) -> Streaming:
        """The answer's pieces as the server sends them. Connecting (with retries) happens here, so a server that
        is down raises ModelUnavailable before any piece; a stream cut later ends with the text so far."""
        feed = SSEFeed(self, prompt, max_tokens, deadline)
        feed.open()
        streaming = Streaming(iter(()), self.count_chat(prompt), self.model, self.label)
        streaming.pieces = feed.pieces(streaming)
        return streaming


class SSEFeed:
    """One streamed chat completion read on the engine loop, its pieces handed to the caller's thread."""

    def __init__(self, engine: OpenAIEngine, prompt: str, max_tokens: int, deadline: float):
        self.engine, self.prompt, self.max_tokens, self.deadline = engine, prompt, max_tokens, deadline
        self.queue: queue.Queue = queue.Queue()
        self.task: concurrent.futures.Future | None = None
        self.usage: Usage | None = None
        self.text: list[str] = []  # every piece the server sent, read by the caller or not
        self.finish_reason: object = None

    def open(self) -> None:
        engine = self.engine
        ready = threading.Event()
        outcome: list = []

        async def run():
            srv = server(engine.base_url, engine.options)
            try:
                model = await engine.served(srv, self.deadline)
                payload = {
                    "model": model,
                    "messages": engine.messages(self.prompt),
                    "max_tokens": self.max_tokens,
                    "temperature": 0.0,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                async with srv.slot(self.deadline, f"{engine.base_url}/chat/completions"):  # until read through
                    response = await send(
                        srv,
                        "POST",
                        "chat/completions",
                        payload,
                        engine.headers(),
                        self.deadline,
                        engine.options,
                        stream=True,
                    )
                    ready.set()
                    try:
                        await self.read(response)
                    except (httpx.TransportError, httpx.TimeoutException):
                        srv.breaker.failure(time.time())
                    finally:
                        await response.aclose()
                        self.queue.put(None)
            except ModelUnavailable as exc:  # raised before the stream began: nothing was read
                outcome.append(exc)
                ready.set()

        self.task = asyncio.run_coroutine_threadsafe(run(), engine.loop.loop)
        ready.wait()
        if outcome:
            raise outcome[0]

    async def read(self, response: httpx.Response) -> None:
        """Server-sent events until [DONE]: each delta's text goes to the queue; the last usage seen is kept (a
        server may repeat cumulative usage in every chunk, or send it after finish_reason). A line that is not
        JSON is skipped, never fatal."""
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if not isinstance(chunk, dict):
                continue
            self.usage = usage_of(chunk) or self.usage
            for choice in chunk.get("choices") or []:
                if not isinstance(choice, dict):
                    continue
                self.finish_reason = choice.get("finish_reason") or self.finish_reason
                text = (choice.get("delta") or {}).get("content")
                if text:
                    self.text.append(text)
                    self.queue.put(text)

    def pieces(self, streaming: Streaming, grace_s: float = 2.0):
        """The queued pieces. Closed early (the answer reached its length), the read goes on for up to `grace_s` so the
        server's closing usage still arrives (it was asked for at most that length), then it is cancelled: the
        response closes and the server stops generating; cancelled (Streaming.cancel), it is cut at once. Then
        the stream's output as generated (count_output: the server's count where the stream carried one, else
        every piece it sent counted in the model's tokenizer) and the server's usage."""
        try:
            while (piece := self.queue.get()) is not None:
                yield piece
        finally:
            if self.task is not None:
                try:
                    self.task.result(timeout=0.0 if streaming.abandoned else grace_s)
                except concurrent.futures.TimeoutError:
                    self.task.cancel()
            streaming.server = self.usage
            streaming.output_tokens = self.engine.count_output("".join(self.text), self.finish_reason, self.usage)


def scorer(spec) -> OpenAIEngine:
    return OpenAIEngine(spec)


def generator(spec) -> OpenAIEngine:
    return OpenAIEngine(spec)
