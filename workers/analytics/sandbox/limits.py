"""The limits a caller's analytics work runs under, enforced twice: inside the engine (readonly, time, memory and
threads on every query) and on the sandbox process itself, where the engine's limits do not reach (rows built in
Python, a query stuck outside the engine's checks): its data segment is capped at JEV_QUERY_MEMORY_MB plus the
engine's own footprint (RLIMIT_DATA), and it stops itself JEV_QUERY_TIME_S after its tables are loaded, its
parent killing it GRACE_S later if it has not.
"""

from __future__ import annotations

import dataclasses
import resource

ENGINE_MB = 512  # the sandbox engine's data segment once started (~400 MB measured), on top of the query limit
ENGINE_FIRST_S = 1.0  # the engine's own time limit answers first, with its error name; the child's after this
GRACE_S = 3.0  # after its time is up, how long a child has to say so before its parent kills it


@dataclasses.dataclass(frozen=True)
class Limits:
    time_s: float = 30.0
    memory_mb: int = 1024
    threads: int = 1

    @classmethod
    def of(cls, settings) -> Limits:
        return cls(settings.query_time_s, settings.query_memory_mb, settings.query_threads)

    def query_settings(self) -> dict:
        """Readonly comes last: the engine applies settings in order and refuses any change after readonly=1."""
        return {
            "max_execution_time": self.time_s,
            "max_memory_usage": self.memory_mb << 20,
            "max_threads": self.threads,
            "readonly": 1,
        }

    def process_bytes(self) -> int:
        """The child's data segment limit."""
        return (self.memory_mb + ENGINE_MB) << 20

    def hold_this_process(self) -> None:
        """Cap this process's data segment (the child calls it first thing, before its engine starts)."""
        limit = self.process_bytes()
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit if hard == resource.RLIM_INFINITY else min(limit, hard)))

    def over_time(self) -> str:
        return (
            f"stopped at JEV_QUERY_TIME_S={self.time_s:g}: the query ran longer; narrow --since or the query, "
            f"or add a LIMIT"
        )

    def over_memory(self) -> str:
        return (
            f"stopped at JEV_QUERY_MEMORY_MB={self.memory_mb}: the query or its answer needs more memory; "
            f"aggregate, narrow the query or add a LIMIT"
        )


class Limited:
    """The sandbox engine's client, every query under the caller's limits and read-only."""

    def __init__(self, client, limits: Limits):
        self.client, self.limits = client, limits

    def query(self, sql: str, parameters: dict | None = None, settings: dict | None = None):
        return self.client.query(
            sql, parameters=parameters, settings={**(settings or {}), **self.limits.query_settings()}
        )

    def command(self, sql: str, parameters: dict | None = None, settings: dict | None = None):
        return self.client.command(
            sql, parameters=parameters, settings={**(settings or {}), **self.limits.query_settings()}
        )
