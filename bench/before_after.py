"""One benchmark, two checkouts, side by side in one run: the code before a change against the code after it.

Runs `SCRIPT ARGS…` in each checkout with that checkout on PYTHONPATH, alternating the order every round so drift
on a shared machine falls on both sides alike, and reports the median of every numeric figure both print and after
÷ before. Make the "before" checkout with `git worktree add /tmp/jev-before <commit>`; --same-script runs the after
checkout's copy of a benchmark the before code lacks.

    .venv/bin/python bench/before_after.py --before /tmp/jev-before --after . --rounds 2 -- bench/load.py --trials 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def run(checkout: Path, command: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, *command], cwd=checkout, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{command[0]} failed in {checkout} (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def figures(report: dict) -> dict:
    """The numeric figures of a report, one level of nesting flattened (`cpu_ms_per_decision.stages`)."""
    flat = {}
    for key, value in report.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return {k: v for k, v in flat.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def medians(runs: list[dict]) -> dict:
    flat = [figures(r) for r in runs]
    return {k: statistics.median(f[k] for f in flat if k in f) for k in flat[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", type=Path, required=True, help="checkout of the code before (a git worktree)")
    p.add_argument("--after", type=Path, default=Path("."), help="checkout of the code after (default: here)")
    p.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating")
    p.add_argument(
        "--same-script",
        action="store_true",
        help="run the after checkout's copy of SCRIPT on both sides (a benchmark the before code lacks)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- SCRIPT ARGS… (relative to each checkout)")
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("name the benchmark after --, e.g. -- bench/load.py --burst 3000")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    if args.same_script:
        command = [str(sides["after"] / command[0]), *command[1:]]
    for side, checkout in sides.items():
        if not (checkout / command[0]).is_file():
            p.error(f"{side}: {checkout / command[0]} does not exist")
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for round_ in range(args.rounds):
        for side in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
            print(f"round {round_ + 1}: {side}", file=sys.stderr, flush=True)
            runs[side].append(run(sides[side], command))
    before, after = medians(runs["before"]), medians(runs["after"])
    shared = [k for k in before if k in after]
    print(
        json.dumps(
            {
                "command": command,
                "rounds": args.rounds,
                "runs": runs,
                "before": {k: before[k] for k in shared},
                "after": {k: after[k] for k in shared},
                "after_over_before": {k: round(after[k] / before[k], 3) for k in shared if before[k]},
            }
        )
    )


if __name__ == "__main__":
    main()
