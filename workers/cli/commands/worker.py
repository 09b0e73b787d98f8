"""`jev worker stream|score`: run one process of the pipeline against JEV_BROKER."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "worker",
        help="run a pipeline process: the Faust stages or a scoring worker",
        description="`stream` runs every Faust stage (ingest, distill, cache, postprocess, usage "
        "sink) and owns the ClickHouse connection; `score` runs a scoring worker. "
        "Scale out by running more of either against the same broker.",
    )
    p.add_argument("role", choices=["stream", "score"])
    p.set_defaults(func=run)


def run(args, settings) -> int:
    if args.role == "score":
        from workers.processes.scoring_worker import main
    else:
        from workers.processes.stage_process import serve_stages as main
    main()
    return 0
