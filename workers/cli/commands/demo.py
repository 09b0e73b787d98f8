"""`jev demo`: run the main job on the embedded default and report what it did."""

from __future__ import annotations

import asyncio
import sys

import orjson


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="run the whole pipeline locally on a bundled workload and report",
        description="Starts a local Kafka-protocol broker, the Faust stages, a scoring worker and "
        "the embedded ClickHouse; replays N realistic decision requests (plus a few "
        "malformed ones) and reports tiers, tokens and latency. Exits 1 if any "
        "request got no decision.",
    )
    p.add_argument("--requests", type=int, default=500, metavar="N", help="requests to replay (default 500)")
    p.add_argument(
        "--stages",
        type=int,
        default=1,
        metavar="N",
        help="stage processes (default 1; the first owns ClickHouse, the others are child processes)",
    )
    p.add_argument("--scorers", type=int, default=1, metavar="M", help="scoring worker processes (default 1)")
    p.add_argument(
        "--shadow-rate",
        default="0.1",
        metavar="R",
        help="share of requests also decided the naive way to measure each saving's agreement "
        "(default 0.1 here, for a useful sample of a short run; JEV_SHADOW_RATE in production)",
    )
    p.add_argument(
        "--reworded-share",
        type=float,
        default=0.0,
        metavar="S",
        help="share of product searches asked again in other words (default 0), about 500 wordings a "
        "search in English and 290 in Chinese (asked in Chinese as often as new decisions are "
        "Chinese): repeated intent for the semantic cache (L2), which serves only once its "
        "verdicts and its shipped prior certify the error bound (JEV_CACHE_MAX_ERROR): --requests 2000 "
        "--reworded-share 1 served its first L2 hit at request 224, 226 in all",
    )
    p.add_argument(
        "--model-url",
        metavar="URL",
        default="",
        help="an OpenAI-compatible server's base URL (http://host:port/v1: vLLM, llama.cpp, SGLang, TGI, "
        "Ollama, a provider): the demo's generate requests (tier llm) go to the model it serves, and "
        "by_model puts the server's token count beside Jev's",
    )
    p.add_argument(
        "--escalate",
        action="store_true",
        help="also send decisions the fine tier is unsure of (confidence < 0.5) to the served model as "
        "the escalation tier (llm), each decision type given 20 s: for a model that ranks well "
        "(SmolLM2-135M does not: it picks by letter position) on a server that takes calls at once",
    )
    p.add_argument(
        "--model-concurrency",
        type=int,
        default=1,
        metavar="N",
        help="calls Jev sends the model server at once (default 1: llama.cpp's Python server answers one "
        "at a time; raise it for vLLM, SGLang or a provider). Calls beyond it queue, earliest "
        "deadline first, within each request's deadline",
    )
    p.add_argument(
        "--local-model",
        action="store_true",
        help="start the local OpenAI-compatible server (llama.cpp serving SmolLM2-135M-Instruct on the CPU; "
        "`make model-server` installs it), run as with --model-url against it, and stop it after; "
        "an error when it is not installed",
    )
    p.add_argument(
        "--model-server",
        choices=("llama", "vllm"),
        default="llama",
        help="which local server to start: llama (llama.cpp's llama-server, `make model-server`) or vllm (vLLM's "
        "CPU build with prefix caching, `make vllm`: about 5 GB of RAM, a few minutes to start on a busy 2-core "
        "machine); with vllm the decisions the fine tier is unsure of also go to it (--escalate) and Jev sends it "
        "4 calls at once unless --model-concurrency says otherwise",
    )
    p.add_argument(
        "--no-model-server",
        action="store_true",
        help="answer with the in-process extractive generator (no escalation tier) even when the local "
        "model server is installed; by default the demo starts it when it is",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--metrics-out",
        metavar="FILE",
        default="",
        help="write the final /metrics scrape of every process the demo ran to FILE (Prometheus text) "
        "and report the series the alert rules and dashboard read that none of them moved",
    )
    p.set_defaults(func=run)


def run(args, settings) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from streams.shadow.sample import parse_rates
    from workers.harness.demo import run_demo

    if args.stages < 1 or args.scorers < 1:
        print("jev demo: --stages and --scorers must be at least 1", file=sys.stderr)
        return 2
    if not 0 <= args.reworded_share <= 1:
        print(f"jev demo: --reworded-share must be in [0, 1], got {args.reworded_share}", file=sys.stderr)
        return 2
    try:
        parse_rates(args.shadow_rate)
    except ValueError as exc:
        print(f"jev demo: --shadow-rate: {exc}", file=sys.stderr)
        return 2
    if args.model_concurrency < 1:
        print("jev demo: --model-concurrency must be at least 1", file=sys.stderr)
        return 2
    if not (args.model_url or args.no_model_server):
        from pathlib import Path

        from infra.model_server import idle_cores, missing_for, server_for

        vllm = args.model_server == "vllm"
        why = missing_for(args.model_server)
        if why and (args.local_model or vllm):
            print(f"jev demo: --{'model-server vllm' if vllm else 'local-model'}: {why}", file=sys.stderr)
            return 2
        if why:
            print(
                f"jev demo: generate answers come from the extractive generator (sentences of the request's own "
                f"text), not a model: {why}",
                file=sys.stderr,
            )
        else:
            log = Path(settings.data_dir) / "model_server.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            threads = 1 if vllm else idle_cores()
            print(
                f"jev demo: starting the local model server ({'vLLM' if vllm else 'llama.cpp'}, "
                f"SmolLM2-135M-Instruct, {threads} thread(s); log {log})",
                file=sys.stderr,
            )
            if vllm:
                args.escalate = True
                args.model_concurrency = args.model_concurrency if args.model_concurrency > 1 else 4
            with server_for(args.model_server, log=log, threads=threads) as server:
                args.local_model, args.model_url = False, server.url
                return run(args, settings)
    if args.model_url:
        from workers.harness.demo import served_settings

        try:
            settings = served_settings(settings, args.model_url, args.model_concurrency, args.escalate)
        except ValueError as exc:
            print(f"jev demo: --model-url: {exc}", file=sys.stderr)
            return 2
    err = Console(stderr=True)
    with Progress(console=err, transient=True) as progress:
        report = asyncio.run(
            run_demo(
                settings.replace(shadow_rate=args.shadow_rate),
                args.requests,
                progress,
                args.stages,
                args.scorers,
                args.metrics_out,
                args.reworded_share,
            )
        )
    if args.json:
        print(orjson.dumps(report).decode())
    else:
        print_report(report)
    return 0 if report["decided"] == report["requests"] else 1


def print_report(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title="jev demo", show_header=False)
    saved = 1 - r["tokens"]["actual"] / r["tokens"]["nominal"] if r["tokens"]["nominal"] else 0.0
    for label, value in [
        ("requests", r["requests"]),
        ("decided", r["decided"]),
        ("rejected (bad input)", f"{r['rejected']}  {', '.join(r['rejected_reasons'])}"),
        ("decisions by tier", ", ".join(f"{k} {v}" for k, v in r["tiers"].items())),
        ("generate answers from", r["generator"]),
        (
            "decisions by language",
            "; ".join(
                f"{lang} {v['decided']}/{v['requests']}: " + ", ".join(f"{k} {n}" for k, n in v["tiers"].items())
                for lang, v in r["by_language"].items()
            ),
        ),
        ("fallbacks by reason", ", ".join(f"{k} {v}" for k, v in r["fallbacks"].items()) or "none"),
        ("tokens actual / nominal", f"{r['tokens']['actual']:,} / {r['tokens']['nominal']:,}  ({saved:.1%} saved)"),
        (
            "cache hits (tokens saved)",
            ", ".join(
                f"{k.removeprefix('cache_')} {v['hits']} ({v['tokens_saved']:,})"
                for k, v in r["cache"].items()
                if isinstance(v, dict)
            )
            or "none",
        ),
        ("L3 pre-answer tokens", f"{r['cache']['l3_prefetch_tokens']:,}"),
        ("agreement with the naive path", agreement_line(r)),
        (
            "tokens by model (Jev's / server's, drift; cache reads claimed / confirmed, drift; cost)",
            "; ".join(
                f"{m} {v['calls']} calls {v['tokens_jev']:,} / "
                + ("-" if v["tokens_server"] is None else f"{v['tokens_server']:,}, {v['drift']:+.1%}")
                + (
                    f"; {v['cached_claimed']:,} / {v['cached_confirmed']:,}, {v['cached_drift']:+.1%}"
                    if v.get("cached_drift") is not None
                    else ""
                )
                + f", ${v['cost']:.4f}"
                for m, v in r["by_model"].items()
            )
            or "none",
        ),
        *(
            (f"{label} p50 / p95 / p99", "{p50} ms / {p95} ms / {p99} ms".format(**r["latency"][key]))
            for key, label in (
                ("total_ms", "latency"),
                ("queue_ms", "  queued (admission to work)"),
                ("service_ms", "  in service"),
            )
        ),
        (
            "streamed answers",
            "{requests} ({generated} generated), {chunks} chunks, {tokens:,} tokens delivered "
            "({generated_tokens:,} generated), first chunk p50 {first_chunk_ms_p50} ms, "
            "{tokens_per_s_p50} tokens/s".format(**r["stream"]),
        ),
        ("usage rows in ClickHouse", r["clickhouse_rows"]),
        ("wall time", f"{r['wall_s']} s"),
    ]:
        t.add_row(label, str(value))
    console.print(t)
    console.print(mechanism_table(r))
    if r["decided"] < r["requests"]:
        print(f"{r['requests'] - r['decided']} requests got no decision", file=sys.stderr)


def agreement_line(r: dict) -> str:
    o, s = r["agreement"]["overall"], r["shadow"]
    share = "n/a" if o["agreement"] is None else f"{o['agreement']:.1%}"
    return (
        f"{share} of {o['verdicts']} sampled decisions (rate {s['rate']}; {s['dropped']} dropped, "
        f"{s['skipped']} skipped; shadow cost {s['tokens']:,} tokens, not counted above)"
    )


def mechanism_table(r: dict):
    """Tokens saved by each mechanism beside the agreement it kept on the sampled requests it acted on."""
    from rich.table import Table

    t = Table(
        "mechanism",
        "tokens saved",
        "verdicts",
        "agreement",
        "lower bound",
        "floor",
        title="savings and the agreement each kept",
    )
    for name, m in r["agreement"]["by_mechanism"].items():
        t.add_row(
            name,
            f"{m['tokens_saved']:,}",
            str(m["verdicts"]),
            "-" if m["agreement"] is None else f"{m['agreement']:.1%}",
            "-" if m["lower"] is None else f"{m['lower']:.3f}",
            f"{m['floor']}{' (labels)' if m['judged_on'] == 'labelled verdicts' else ''}",
        )
    return t
