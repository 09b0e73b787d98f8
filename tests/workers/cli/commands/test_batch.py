import json
import subprocess
import sys
from pathlib import Path

import pytest

from workers.cli import batch_runner as runner
from workers.cli.main import main

SAMPLE = Path(__file__).parents[4] / "streams" / "batch" / "sample_weekly_reports.jsonl"
MIXED = Path(__file__).parents[3] / "streams" / "batch" / "jobs" / "mixed_shapes.jsonl"


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"job": "j", "member": "a"}'], ":1: batch member misses kind, template, quota_tokens"),
        (["not json"], ":1: not JSON"),
        (['{"job": "", "member": "a", "kind": "k", "template": "t", "quota_tokens": 9}'], "'job' must be a non-empty"),
        (['{"job": "j", "member": "a", "kind": "k", "template": "t", "quota_tokens": 0}'], "positive integer"),
        (
            [
                '{"job": "j", "member": "a", "kind": "k", "template": "t", "quota_tokens": 9}',
                '{"job": "k", "member": "b", "kind": "k", "template": "t", "quota_tokens": 9}',
            ],
            ":2: job 'k' differs",
        ),
        (['{"job": "j", "member": "a", "kind": "k", "template": "t", "quota_tokens": 9}'] * 2, "listed twice"),
        ([], "no members"),
    ],
)
def test_job_file_errors_name_the_line(tmp_path, lines, message):
    path = tmp_path / "job.jsonl"
    path.write_text("\n".join(lines))
    with pytest.raises(runner.JobFileError, match=message):
        runner.read_job(str(path))


def test_sample_job_is_realistic():
    members = runner.read_job(str(SAMPLE))
    assert len(members) >= 10 and len({m.member for m in members}) == len(members)
    assert all(len(m.variables["projects"]) >= 2 and len(m.variables["open_issues"]) >= 2 for m in members)


def test_status_reads_the_saved_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("JEV_BROKER", "kafka://127.0.0.1:1")
    runner.save_report(str(tmp_path), "w14", {"job": "w14", "members": 0, "failed": 0}, [])
    assert main(["batch", "status", "w14", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["job"] == "w14"
    assert main(["batch", "status", "unknown"]) == 1


@pytest.mark.integration
@pytest.mark.parametrize("job", [SAMPLE, MIXED], ids=["sample", "mixed-shapes"])
def test_submit_wait_runs_the_job_through_the_local_pipeline(tmp_path, job):
    """The command as a user runs it, with no broker running: it starts the local pipeline for the job."""
    env = {
        "JEV_DATA_DIR": str(tmp_path),
        "JEV_BROKER": "kafka://127.0.0.1:1",
        "JEV_GENERATOR": "extractive",
        "JEV_BACKEND": "lexical",
        "HF_HUB_OFFLINE": "1",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [sys.executable, "-m", "workers.cli.main", "batch", "submit", str(job), "--wait", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    report = lines[-1]
    assert len(lines) == report["members"] + 1 == 13
    assert {
        "members",
        "results",
        "merged_calls",
        "tokens_merged",
        "tokens_individual",
        "quota_violations",
        "failed",
    } <= set(report)
    assert report["results"] == 12 and report["failed"] == 0 and report["quota_violations"] == 0
    assert report["tokens_merged"] < report["tokens_individual"]
    assert report["clickhouse"]["usage_rows"] == 12
    assert report["clickhouse"]["nominal_tokens"] == report["tokens_individual"]
