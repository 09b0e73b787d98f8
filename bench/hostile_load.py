"""Other tenants' decision latency while one tenant keeps large records in flight.

Each loaded wave of acme's and globex's requests is published right behind tenant `mallory`'s --huge records over
JEV_MAX_RECORD_BYTES (rejected too_large unparsed) and --large records just under the limits (admitted until its
rate in --rates is spent, then rate_limited). Runner, waves and ratios: bench/tenant_mix.py.
Last stdout line: {p50_ratio, p95_ratio, silent, rate_limited, outcomes, ...}.

    PYTHONPATH=. .venv/bin/python bench/hostile_load.py [--huge 21] [--large 21] [--waves 4] [--wave 5]
"""

from __future__ import annotations

import asyncio

import orjson
import tenant_mix

TURN = "the shipment was split across two warehouses and the second box arrived late, please check again " * 20


def record(request_id: str, size: int, huge: bool) -> bytes:
    """A ranking request of mallory of about `size` bytes: one giant state (huge) or a history of 2 KB turns."""
    body = {
        "request_id": request_id,
        "tenant": "mallory",
        "service": "search",
        "decision_type": "ranking",
        "candidates": [{"id": "a", "text": "express shipping"}, {"id": "b", "text": "standard shipping"}],
    }
    if huge:
        return orjson.dumps({**body, "state": "x" * size})
    turns = [{"role": "user" if t % 2 else "assistant", "content": TURN} for t in range(size // (len(TURN) + 40))]
    return orjson.dumps({**body, "state": "which shipping option", "history": turns})


def main() -> None:
    ap = tenant_mix.parser(__doc__, rates="mallory=2:20000,*=50:500000")
    ap.add_argument("--huge", type=int, default=21, help="1 MB records per loaded wave")
    ap.add_argument("--huge-bytes", type=int, default=1_000_000)
    ap.add_argument("--large", type=int, default=21, help="records just under the size limits per loaded wave")
    ap.add_argument("--large-bytes", type=int, default=240_000)
    args = ap.parse_args()

    def hostile(i: int) -> list[bytes]:
        huge = [record(f"huge-{i}-{j}", args.huge_bytes, True) for j in range(args.huge)]
        large = [record(f"large-{i}-{j}", args.large_bytes, False) for j in range(args.large)]
        return [raw for pair in zip(huge, large) for raw in pair] + huge[len(large) :] + large[len(huge) :]

    result = asyncio.run(
        tenant_mix.run(
            args,
            hostile,
            {
                "bench": "hostile_load",
                "huge": args.huge,
                "huge_bytes": args.huge_bytes,
                "large": args.large,
                "large_bytes": args.large_bytes,
            },
        )
    )
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
