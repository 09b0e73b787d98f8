"""Job report: merged vs individual-call tokens and cost, quota compliance, failures — from the results alone.

tokens_merged counts what the merged calls (and any retries) reserve, each member charged its share;
tokens_individual counts one call per member on the same basis, so the two compare what merging saved. A merged
call whose retries made it cost more says so (`notes`), and the planner sends that template's next windows
individually while its retry rate stays that high.
"""

from __future__ import annotations

from schemas.batch import BatchResult
from streams.models import pricing


def summarize(job: str, results: list[BatchResult], members: int, model: str) -> dict:
    ok = [r for r in results if r.status == "ok"]
    merged = sum(r.reserved_tokens for r in results)
    individual = sum(r.individual_tokens for r in results)
    inputs = sum(r.input_tokens for r in results)
    budgets = sum(r.output_budget for r in results)
    return {
        "job": job,
        "members": members,
        "results": len(results),
        "ok": len(ok),
        "failed": len(results) - len(ok),
        "pending": max(0, members - len(results)),
        "merged_calls": len({r.call_id for r in results if r.call_id and r.sent == "merged"}),
        "individual_calls": len({r.call_id for r in results if r.call_id and r.sent == "individual"}),
        "retries": sum(r.retried for r in results),
        "tokens_merged": merged,
        "tokens_individual": individual,
        "tokens_merged_actual": inputs + sum(r.output_tokens for r in results),
        "saved_ratio": round(1 - merged / individual, 4) if individual else 0.0,
        "cost_merged": round(pricing.cost(model, inputs, 0, merged - inputs), 6),
        "cost_individual": round(pricing.cost(model, individual - budgets, 0, budgets), 6),
        "cost_merged_actual": round(sum(r.cost for r in results), 6),
        "quota_violations": sum(r.quota_used > r.quota_tokens for r in ok),
        "quota_compliance": round(sum(r.quota_used <= r.quota_tokens for r in ok) / len(ok), 4) if ok else 0.0,
        "trimmed_members": sum(bool(r.trimmed) for r in results),
        "labels": sorted({r.label for r in results if r.label}),
        "notes": sorted({r.note for r in results if r.note}),
        "model": model,
    }
