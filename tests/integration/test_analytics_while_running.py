"""`jev report`, `jev sql`, `jev flamegraph` and `jev alerts` while the stage process (`jev worker stream`) owns
the embedded ClickHouse: each finds the owner's endpoint and answers from a sandbox, and a tenant's SQL, the
issue's PREWHERE probe included, sees that tenant's rows only."""

import asyncio

import orjson
import pytest

from workers.cli.main import main
from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration

PROBE = (
    "SELECT count() FROM usage_events PREWHERE if(tenant='globex', toInt32(concat('LEAK|',tenant,'|',"
    "request_id,'|',session_id,'|',user_id,'|',business_event)),0)=0"
)


async def test_analytics_commands_answer_while_the_stage_process_runs(settings, monkeypatch, capsys, tmp_path):
    settings = settings.replace(backend="lexical")
    async with Pipeline(settings, known_decision_types(), stages_process=True) as pipe:
        payloads = workload.generate(12, seed=21, repeat_share=0.0, tenant="acme") + workload.generate(
            12, seed=22, repeat_share=0.0, tenant="globex"
        )
        await pipe.publish(payloads)
        decided, _ = await pipe.collect(24, 0, timeout=180)
        assert len(decided) == 24
        monkeypatch.setenv("JEV_CLICKHOUSE_DSN", pipe.settings.clickhouse)

        def run(*argv) -> tuple[int, list[str]]:
            code = main(list(argv))
            return code, capsys.readouterr().out.splitlines()

        for _ in range(60):  # the usage sink writes within its 1 s window
            code, out = await asyncio.to_thread(run, "sql", "--json", "SELECT uniqExact(tenant) AS n FROM usage_events")
            if code == 0 and orjson.loads(out[0])["n"] == 2:
                break
            await asyncio.sleep(1)
        assert code == 0 and orjson.loads(out[-1])["via"] == "owner"
        code, out = await asyncio.to_thread(run, "report", "--json", "--since", "1h")
        report = orjson.loads(out[-1])
        assert code == 0 and report["totals"]["requests"] >= 24
        assert set(report["indices"]) == {"te", "cp", "hr", "pe"}  # their values may still wait on the sink
        code, _ = await asyncio.to_thread(
            run, "flamegraph", "--since", "1h", "--weight", "nominal", "-o", str(tmp_path / "f.svg")
        )  # nominal: the lexical backend spends no tokens
        assert code == 0 and "globex" in (tmp_path / "f.svg").read_text()
        code, out = await asyncio.to_thread(run, "alerts", "--json")
        assert code in (0, 1) and "alerts" in orjson.loads(out[-1])
        code, out = await asyncio.to_thread(run, "sql", "--json", "--tenant", "acme", PROBE)
        acme_rows = await asyncio.to_thread(
            run, "sql", "--json", "SELECT countIf(tenant = 'acme') AS n FROM usage_events"
        )
        assert code == 0 and orjson.loads(out[0])["count()"] == orjson.loads(acme_rows[1][0])["n"]
        assert "LEAK" not in "\n".join(out)
