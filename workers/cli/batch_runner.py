"""Submit a batch job to the broker, wait for its results, and read where a job stands.

When no broker answers at settings.broker, `run_local` starts the local pipeline (workers/harness/pipeline.py) for
the duration of the job, like `jev demo`.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from infra.broker import wait_ready
from schemas.batch import BatchMember, BatchResult
from schemas.topics import name
from streams.batch.report import summarize
from streams.batch.stage import decode_member


class JobFileError(ValueError):
    pass


def read_job(path: str) -> list[BatchMember]:
    """Members of one job from a JSONL file; errors name the line and the field."""
    members, seen = [], set()
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            member = decode_member(line.encode())
        except ValueError as exc:
            raise JobFileError(f"{path}:{number}: {exc}") from None
        if members and member.job != members[0].job:
            raise JobFileError(f"{path}:{number}: job {member.job!r} differs from {members[0].job!r}: one job per file")
        if member.member in seen:
            raise JobFileError(f"{path}:{number}: member {member.member!r} listed twice")
        seen.add(member.member)
        member.submitted_at = time.time()
        members.append(member)
    if not members:
        raise JobFileError(f"{path}: no members (one JSON object per line)")
    return members


def broker_reachable(bootstrap: str, timeout: float = 1.0) -> bool:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        wait_ready(host, int(port), timeout)
        return True
    except (TimeoutError, ValueError):
        return False


async def publish(bootstrap: str, members: list[BatchMember]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for m in members:
            await producer.send(name("batch"), m.dumps(), key=m.job.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def read_topics(bootstrap: str, job: str, expect: int | None, timeout: float, on_result=None):
    """(members submitted, results by member) of `job`, read from the start of the batch topics until
    `expect` results arrived (None: until the topics are drained) or `timeout` passed."""
    consumer = AIOKafkaConsumer(
        name("batch"), name("batch_results"), bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    submitted: set[str] = set()
    results: dict[str, BatchResult] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (expect is None or len(results) < expect):
            batch = await consumer.getmany(timeout_ms=500)
            if expect is None and not batch:
                break
            for tp, msgs in batch.items():
                for msg in msgs:
                    if (msg.key or b"").decode() != job:
                        continue
                    if tp.topic == name("batch"):
                        submitted.add(orjson.loads(msg.value).get("member", ""))
                    else:
                        result = BatchResult.loads(msg.value)
                        results.setdefault(result.member, result)  # redelivery repeats, first wins
                        if on_result:
                            on_result(len(results))
    finally:
        await consumer.stop()
    return submitted, results


def save_report(data_dir: str, job: str, report: dict, results: list[BatchResult]) -> Path:
    path = Path(data_dir) / "batch" / f"{job}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"report": report, "results": [r.asdict() for r in results]}, indent=1))
    return path


def saved_report(data_dir: str, job: str) -> dict | None:
    path = Path(data_dir) / "batch" / f"{job}.json"
    return json.loads(path.read_text()) if path.exists() else None


async def submit(settings, members: list[BatchMember], wait: bool, timeout: float, on_result=None):
    """Publish the job; with `wait`, (report, results) once every member has a result, through the client library
    (one JevClient per tenant the members name, each reading its tenant's batch results), or JevTimeout."""
    if not wait:
        await publish(settings.bootstrap, members)
        return None, []
    from streams.runtime.client import JevClient

    job, tenants, done = members[0].job, {}, {}
    for m in members:
        tenants.setdefault(m.tenant, []).append(m)

    async def one(tenant: str, group: list[BatchMember]) -> list[BatchResult]:
        def seen(n: int) -> None:  # results of this tenant's members so far: the job's progress is the sum
            done[tenant] = n
            if on_result:
                on_result(sum(done.values()))

        async with JevClient(tenant, settings=settings, service=group[0].service) as jev:
            return await jev.submit_batch(job, [m.to_representation() for m in group], timeout=timeout, on_result=seen)

    found = {r.member: r for group in await asyncio.gather(*(one(t, g) for t, g in tenants.items())) for r in group}
    results = [found[m.member] for m in members]
    return summarize(job, results, len(members), settings.default_model), results


async def run_local(settings, members: list[BatchMember], timeout: float, on_result=None):
    """Start the local pipeline (broker, stages incl. the batch agents, ClickHouse), run the job, stop it."""
    from workers.harness.pipeline import Pipeline, known_decision_types

    pipe = Pipeline(settings, known_decision_types(settings.decision_types))
    pipe.root.mkdir(parents=True, exist_ok=True)  # Faust creates its datadir without parents
    async with pipe:
        report, results = await submit(pipe.settings, members, True, timeout, on_result)
        await pipe.wait_usage_rows(at_least=len(results), timeout=15)
        rows, spent, nominal = pipe.ch.query(
            "SELECT count(), sum(input_tokens + output_tokens), sum(nominal_tokens) FROM usage_events FINAL "
            "WHERE stage = 'batch' AND business_event = {job:String}",
            parameters={"job": members[0].job},
        ).result_rows[0]
    report["clickhouse"] = {"usage_rows": int(rows), "tokens": int(spent), "nominal_tokens": int(nominal)}
    return report, results
