"""Where every analytics query runs: a child process with its own engine that holds only the rows its caller may
read, so no query text, error or side channel can reach another tenant's rows.

The owner copies the caller's rows out with one fixed query per table, and a fresh child loads them into the same
table definitions and runs the caller's work there, read-only, under JEV_QUERY_TIME_S, JEV_QUERY_MEMORY_MB and
JEV_QUERY_THREADS (held on the process too: limits.py), in the idle CPU class, with no secrets in its
environment. Errors come back without row data.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

from workers.analytics import tenancy
from workers.analytics.sandbox.child import ENDPOINTS, LOADED
from workers.analytics.sandbox.errors import QueryFailed, public_error
from workers.analytics.sandbox.limits import GRACE_S, Limits
from workers.analytics.sandbox.pausing import Pauser
from workers.analytics.sandbox.snapshots import Snapshots, export, scratch

__all__ = ["ENDPOINTS", "Limits", "Pauser", "QueryFailed", "Snapshots", "public_error", "run"]

INDEX_SETTINGS = "JEV_INDEX_"  # the only settings a sandbox gets (the report's healthy index ranges): no secrets
LOAD_ALLOWANCE_S = 60.0  # start-up and loading time allowed before the query limit starts
POLL_S = 0.25  # how often a waiting call looks at its sandbox: each look takes the owner's GIL from its pipeline


def run(
    client,
    endpoint: str,
    body: dict,
    tenant: str | None,
    limits: Limits,
    cancelled: threading.Event | None = None,
    snapshots: Snapshots | None = None,
    pauser: Pauser | None = None,
) -> dict:
    """`endpoint`'s answer to `body`, computed in a fresh sandbox that holds `tenant`'s rows of `client` (every
    tenant's for None or "*"), exported now or taken from `snapshots`, paused by `pauser` while the pipeline is
    busy. Raises QueryFailed with a message safe for the caller."""
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}; known: {', '.join(ENDPOINTS)}")
    tenant = None if tenant in (None, "", tenancy.ADMIN) else tenant
    with tempfile.TemporaryDirectory(prefix="jev-sandbox-", dir=scratch()) as work:
        folder = Path(work)
        folder.chmod(0o700)
        tables = snapshots.take(client, tenant, limits, folder) if snapshots else export(client, tenant, folder, limits)
        (folder / "spec.json").write_bytes(
            orjson.dumps({"endpoint": endpoint, "body": body, "tables": tables, "limits": dataclasses.asdict(limits)})
        )
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": work,
            "LANG": "C.UTF-8",
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            **{k: v for k, v in os.environ.items() if k.startswith(INDEX_SETTINGS)},
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers.analytics.sandbox.child", work, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=work,
        )
        deadline, loaded = time.monotonic() + limits.time_s + LOAD_ALLOWANCE_S, False
        if pauser is not None:
            pauser.add(proc)
        try:
            while proc.poll() is None:
                if pauser is not None:
                    pauser.in_flight.busy()  # a hold that expired resumes the sandboxes
                if cancelled is not None and cancelled.is_set():
                    raise QueryFailed("cancelled: the caller went away")
                if not loaded and (folder / LOADED).exists():  # the query's own time starts now
                    loaded, deadline = True, min(deadline, time.monotonic() + limits.time_s + GRACE_S)
                if time.monotonic() > deadline:
                    raise QueryFailed(
                        limits.over_time()
                        if loaded
                        else f"stopped after {LOAD_ALLOWANCE_S:.0f} s of loading the caller's rows "
                        f"(JEV_QUERY_TIME_S={limits.time_s:g} more for the query); narrow --since"
                    )
                (cancelled or threading.Event()).wait(POLL_S)
        finally:
            if pauser is not None:
                pauser.remove(proc)
            if proc.poll() is None:
                proc.kill()
            out, err = proc.communicate()
    lines = out.strip().splitlines()
    if not lines:
        raise QueryFailed(
            f"the query sandbox exited with code {proc.returncode} and no answer"
            + (
                f" ({public_error(RuntimeError(err.decode(errors='replace').strip().splitlines()[-1]))})"
                if err.strip()
                else ""
            )
        )
    answer = orjson.loads(lines[-1])
    if "error" in answer:
        raise QueryFailed(answer["error"])
    return answer["result"]
