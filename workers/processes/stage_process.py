"""The stage process, the production entry (`jev worker stream`, `python -m workers.processes.stage_process`): every
Faust stage agent in one process."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

import faust
import orjson

from streams.runtime.app import create_app
from streams.runtime.usage_spill import durable_sink
from streams.scoring.factory import known_decision_types
from workers.analytics.lag import export_lag_forever
from workers.analytics.owner import QueryServer


class StageWorker(faust.Worker):
    """The Faust worker of the stage process, which stops within `grace_s` of SIGTERM or SIGINT: the graceful stop
    (agents, consumers, leases returned, the sink drained) runs meanwhile; what it has not finished by then is left
    as a kill leaves it, and `on_exit` runs before the process exits."""

    def __init__(self, *args, grace_s: float, on_exit, **kwargs):
        super().__init__(*args, **kwargs)
        self.grace_s, self.on_exit = grace_s, on_exit

    def _schedule_shutdown(self, signum: signal.Signals) -> None:
        if not self._signal_stop_time:
            threading.Thread(target=self.exit_after_grace, args=(signum,), name="jev-stop", daemon=True).start()
        super()._schedule_shutdown(signum)

    def exit_after_grace(self, signum: signal.Signals) -> None:
        time.sleep(self.grace_s)
        logging.getLogger("jev.stages").warning(
            "not stopped %.1f s after %s: exiting now (what was not committed is read again)", self.grace_s, signum.name
        )
        self.on_exit()
        logging.shutdown()
        os._exit(128 + signum)


class StartupPhases:
    """When each phase of the stage process's start-up ended (wall-clock seconds): `main` (Python and Jev
    imported), `app` (the app built: its models loaded), `assigned` (the first partitions of the Faust group
    assigned), `recovered` (its tables recovered; the agents and tasks start), `ready`. Logged (jev.stages, info)
    and written into the readiness file as JSON, where whoever started the process reads how long each took."""

    def __init__(self):
        self.times: dict[str, float] = {}

    def mark(self, phase: str) -> None:
        if phase not in self.times:
            self.times[phase] = time.time()
            first = min(self.times.values())
            logging.getLogger("jev.stages").info("start-up: %s at +%.1f s", phase, self.times[phase] - first)

    def write(self, path: Path) -> None:
        """The phases into `path`, which appears complete or not at all (the starter polls for it)."""
        partial = path.with_suffix(".partial")
        partial.write_bytes(orjson.dumps(self.times))
        os.replace(partial, path)


def serve_stages() -> None:
    """The Faust stage process (`jev worker stream`): every stage agent; ClickHouse through the durable sink,
    answering `jev sql` for other processes; /metrics when JEV_METRICS_PORT is set; secrets redacted in logs.

    Writes <data_dir>/stages-<pid>.ready once the app runs (its StartupPhases as JSON). Events spilled while ClickHouse
    was unavailable (or by a killed predecessor) are drained from <data_dir>/spill. With JEV_USAGE_SINK=0 (every stage
    process but one, when several run) it opens no ClickHouse and sends its usage by the topic only.
    """
    from streams import settings as settings_mod
    from streams.core.metrics import start_metrics_server
    from streams.core.process import freeze_heap
    from streams.security import logsafe

    phases = StartupPhases()
    phases.mark("main")
    logsafe.install()
    settings = settings_mod.load()
    logging.basicConfig(level=settings.log_level.upper())
    start_metrics_server(settings)
    sink = durable_sink(settings) if settings.usage_sink else None
    app = create_app(settings, known_decision_types(settings.decision_types), sink=sink).faust
    phases.mark("app")

    @app.on_partitions_assigned.connect
    async def note_assigned(sender, assigned, **kwargs):
        phases.mark("assigned")

    ready = Path(settings.data_dir) / f"stages-{os.getpid()}.ready"
    query_server = QueryServer.of(settings) if sink is not None else None

    @app.task
    async def export_consumer_lag():
        await export_lag_forever(settings.bootstrap, settings.lag_export_s)

    @app.task
    async def mark_ready():
        phases.mark("recovered")
        if query_server is not None:
            await query_server.__aenter__()
        freeze_heap()
        phases.mark("ready")
        phases.write(ready)

    def leave_no_markers() -> None:
        ready.unlink(missing_ok=True)
        if query_server is not None and query_server.path is not None:
            query_server.path.unlink(missing_ok=True)

    worker = StageWorker(
        app,
        loglevel=settings.log_level,
        redirect_stdouts=False,
        quiet=True,
        grace_s=settings.stop_grace_s,
        on_exit=leave_no_markers,
    )
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    finally:
        leave_no_markers()
        if query_server is not None:
            query_server.close()
        if sink is not None:
            sink.drain(timeout=10)
            sink.close()


if __name__ == "__main__":
    serve_stages()
