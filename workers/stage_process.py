"""The stage process, the production entry (`jev worker stream`, `python -m workers.stage_process`): every Faust
stage agent in one process."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import faust

from streams.app import create_app
from streams.usage.spill import durable_sink
from workers.analytics.owner import QueryServer
from workers.lag import export_lag_forever
from streams.scoring.factory import known_decision_types


def serve_stages() -> None:
    """The Faust stage process (`jev worker stream`): every stage agent; ClickHouse through the durable sink,
    answering `jev sql` for other processes; /metrics when JEV_METRICS_PORT is set; secrets redacted in logs.

    Writes <data_dir>/stages-<pid>.ready once the app runs. Events spilled while ClickHouse was unavailable
    (or by a killed predecessor) are drained from <data_dir>/spill. With JEV_USAGE_SINK=0 (every stage process
    but one, when several run) it opens no ClickHouse and sends its usage by the topic only.
    """
    from streams import logsafe, settings as settings_mod
    from streams.metrics import start_metrics_server
    from streams.process import freeze_heap

    logsafe.install()
    settings = settings_mod.load()
    logging.basicConfig(level=settings.log_level.upper())
    start_metrics_server(settings)
    sink = durable_sink(settings) if settings.usage_sink else None
    app = create_app(settings, known_decision_types(settings.decision_types), sink=sink)
    ready = Path(settings.data_dir) / f"stages-{os.getpid()}.ready"
    query_server = QueryServer.of(settings) if sink is not None else None

    @app.task
    async def export_consumer_lag():
        await export_lag_forever(settings.bootstrap, settings.lag_export_s)

    @app.task
    async def mark_ready():
        if query_server is not None:
            await query_server.__aenter__()
        freeze_heap()
        ready.touch()

    worker = faust.Worker(app, loglevel=settings.log_level, redirect_stdouts=False, quiet=True)
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    finally:
        ready.unlink(missing_ok=True)
        if query_server is not None and query_server.path is not None:
            query_server.path.unlink(missing_ok=True)
        if query_server is not None:
            query_server.close()
        if sink is not None:
            sink.drain(timeout=10)
            sink.close()


if __name__ == "__main__":
    serve_stages()
