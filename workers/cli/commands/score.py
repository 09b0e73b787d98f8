"""`jev score FILE.jsonl`: score decision requests offline with the scoring workers' engine (no broker).

One request per line: {"request_id", "state", "candidates": [{"id", "text"}], "label"?, "decision_type"?}.
`--model` names the fine tier's model in the pool; for a served model (engine openai) `--model-url` says where its
server listens for this run, and `--local-model` starts the bundled llama.cpp server (SmolLM2, infra/model_server.py)
and scores with the pool's `smollm2-server` against it. The summary's `calls_per_decision` counts the HTTP calls
made to model servers (0 when every tier ran in this process).
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from pathlib import Path

import orjson

from schemas.records import Candidate, Request
from streams.models import http
from streams.models import pool as pool_mod
from streams.scoring.engine import MODES
from streams.scoring.factory import build_engine, work_for
from streams.usage.drift import drift

LOCAL_MODEL = "smollm2-server"  # the pool entry --local-model scores with (SmolLM2 served by llama.cpp)
LOCAL_TIMEOUT_MS = 60_000.0  # --local-model without --timeout-ms: a CPU server takes seconds per decision


def register(sub) -> None:
    p = sub.add_parser("score", help="score decision requests from a JSONL file with the scoring engine")
    p.add_argument("file", type=Path, help="JSONL: one {request_id, state, candidates, label?} per line")
    p.add_argument("--mode", choices=MODES, default="cascade", help="tiers to use (default cascade)")
    p.add_argument("--decision-type", default="ranking", help="decision type of lines that name none")
    p.add_argument(
        "--model",
        metavar="NAME",
        default="",
        help="the fine tier's model: a name in the model pool (JEV_MODELS), e.g. minilm or a served "
        "model, or openai:http://host:port/v1 (default: the fine tier of decision_types.yaml)",
    )
    p.add_argument(
        "--model-url",
        metavar="URL",
        default="",
        help="where the --model entry's server listens for this run (an openai-engine entry, e.g. "
        "--model smollm2-server --model-url http://127.0.0.1:8080/v1); without --model: openai:URL",
    )
    p.add_argument(
        "--local-model",
        action="store_true",
        help=f"start the bundled llama.cpp server (SmolLM2-135M; `make model-server` installs it), score "
        f"with --model (default {LOCAL_MODEL}) against it, and stop it after (--timeout-ms defaults "
        f"to {LOCAL_TIMEOUT_MS:.0f} then)",
    )
    p.add_argument(
        "--timeout-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="every decision type's time budget for this run (default: each type's timeout_ms); a "
        "model server on a small CPU may need more than the 300-800 ms the bundled types allow",
    )
    p.add_argument("--json", action="store_true", help="one JSON line per decision, then a summary line")
    p.set_defaults(func=run)


def parse_line(raw: dict, default_type: str) -> tuple[Request, str]:
    try:
        request = Request(
            request_id=str(raw["request_id"]),
            tenant=raw.get("tenant", "offline"),
            service=raw.get("service", "jev-score"),
            decision_type=raw.get("decision_type", default_type),
            state=raw["state"],
            candidates=[Candidate(id=str(c["id"]), text=c["text"]) for c in raw["candidates"]],
            human_decision=raw.get("human_decision", ""),
        )
    except (KeyError, TypeError) as err:
        raise ValueError(f"needs request_id, state and candidates [{{id, text}}]: missing {err}") from None
    return request, str(raw.get("label", ""))


def read_requests(path: Path, default_type: str) -> list[tuple[Request, str]]:
    if not path.exists():
        raise SystemExit(f"{path}: no such file")
    items = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                items.append(parse_line(orjson.loads(line), default_type))
            except (orjson.JSONDecodeError, ValueError) as err:
                raise SystemExit(f"{path}:{number}: {err}") from None
    return items


def score(engine, items: list[tuple[Request, str]], model: str, progress=None) -> tuple[list[dict], dict]:
    """Decide every request; rows per decision and the summary (shared with bench/cascade.py)."""
    rows, tiers, fine_models, correct, labeled = [], Counter(), Counter(), 0, 0
    calls_before = http.calls()
    actual = nominal = served_jev = served_server = 0
    for request, label in items:
        decision, events = engine.decide(work_for(request, model))
        for e in events:
            if e.count_source == "server":
                served_jev += e.input_tokens + e.output_tokens
                served_server += e.server_input_tokens + e.server_output_tokens
        tiers[decision.tier] += 1
        fine_models.update(step.split(":", 1)[1] for step in decision.chain if step.startswith("fine:"))
        actual += decision.input_tokens + decision.output_tokens
        nominal += decision.nominal_tokens
        row = {
            "request_id": request.request_id,
            "action_id": decision.action_id,
            "tier": decision.tier,
            "confidence": decision.confidence,
            "input_tokens": decision.input_tokens,
            "cache_read_tokens": decision.cache_read_tokens,
            "nominal_tokens": decision.nominal_tokens,
            "latency_ms": decision.latency_ms,
            "chain": decision.chain,
            "mechanisms": {
                e.stack.rsplit(";", 1)[-1]: {"actual": e.input_tokens + e.output_tokens, "nominal": e.nominal_tokens}
                for e in events
            },
        }
        if label:
            labeled += 1
            correct += decision.action_id == label
            row["correct"] = decision.action_id == label
        rows.append(row)
        if progress:
            progress()
    summary = {
        "summary": True,
        "decisions": len(rows),
        "accuracy": round(correct / labeled, 4) if labeled else None,
        "tokens_actual": actual,
        "tokens_nominal": nominal,
        "tiers": dict(tiers),
        "tokens_server": served_server if served_jev else None,
        "drift": drift(served_jev, served_server),
        "model": engine.fine.name,
        "fine_models": dict(fine_models),
        "calls_per_decision": round((http.calls() - calls_before) / len(rows), 3) if rows else None,
        "fallbacks": sum(v for k, v in engine.counters.items() if k.startswith("fallback_")),
        "over_budget": engine.counters["over_budget"],
    }
    return rows, summary


def served_pool(settings, model: str, url: str) -> pool_mod.Pool:
    """The pool with `model`'s server at `url` for this run; `model` must be an openai-engine entry."""
    pool = pool_mod.load(settings.models)
    entry = pool[model]
    if entry.engine != "openai":
        raise ValueError(
            f"--model-url: model {model!r} has engine {entry.engine!r}, not a served model; name an "
            f"entry with engine openai (e.g. {LOCAL_MODEL})"
        )
    return pool.with_model(dataclasses.replace(entry, base_url=url))


def run(args, settings) -> int:
    items = read_requests(args.file, args.decision_type)
    if args.local_model:
        from infra.model_server import ModelServer, missing

        if missing():
            print(f"jev score: --local-model: {missing()}", file=sys.stderr)
            return 2
        log = Path(settings.data_dir) / "model_server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with ModelServer(log=log) as server:
            args.local_model, args.model_url, args.model = False, server.url, args.model or LOCAL_MODEL
            args.timeout_ms = args.timeout_ms or LOCAL_TIMEOUT_MS
            return run(args, settings)
    if args.model_url and not args.model:
        args.model = f"openai:{args.model_url}"
    pool = None
    try:
        if args.model:
            settings = settings.replace(backend=args.model)
            if args.model_url and not args.model.startswith("openai:"):
                pool = served_pool(settings, args.model, args.model_url)
        engine = build_engine(settings, mode=args.mode, pool=pool)
    except (ValueError, KeyError, RuntimeError) as err:
        print(f"jev score: {err.args[0] if err.args else err}", file=sys.stderr)
        return 2
    if args.timeout_ms > 0:
        engine.config = engine.config.with_timeout(args.timeout_ms)
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("scoring", total=len(items))
        rows, summary = score(engine, items, settings.default_model, lambda: bar.advance(task))
    if args.json:
        for row in [*rows, summary]:
            sys.stdout.write(orjson.dumps(row).decode() + "\n")
        return 0
    from rich.table import Table

    table = Table("request", "action", "tier", "confidence", "tokens", "nominal", "ms")
    for r in rows:
        mark = "" if "correct" not in r else (" ✓" if r["correct"] else " ✗")
        table.add_row(
            r["request_id"],
            r["action_id"] + mark,
            r["tier"],
            f"{r['confidence']:.3f}",
            str(r["input_tokens"]),
            str(r["nominal_tokens"]),
            f"{r['latency_ms']:.1f}",
        )
    console = Console()
    console.print(table)
    console.print({k: v for k, v in summary.items() if k != "summary"})
    return 0
