"""Other tenants' decision latency while one tenant floods ingest with 5,000 requests at once.

Each loaded wave of acme's and globex's requests is published right behind --flood requests of tenant `flood`,
whose admission rate (--rates, JEV_TENANT_RATES) rejects most of them `rate_limited` before any decoding; what it
is allowed is taken in turn with the other tenants. Runner, waves and ratios: bench/tenant_mix.py.
Last stdout line: {p50_ratio, p95_ratio, silent, rate_limited, outcomes, ...}.

    PYTHONPATH=. .venv/bin/python bench/tenant_flood.py [--flood 5000] [--waves 4] [--wave 5]
"""

from __future__ import annotations

import asyncio

import orjson
import tenant_mix

from workers.harness import workload


def main() -> None:
    ap = tenant_mix.parser(__doc__, rates="flood=2:20000,*=50:500000")
    ap.add_argument("--flood", type=int, default=5000, help="requests the flooding tenant sends per loaded wave")
    args = ap.parse_args()

    def flood(i: int) -> list[bytes]:
        return workload.generate(args.flood, seed=50_000 + i, repeat_share=0.0, tenant="flood")

    result = asyncio.run(tenant_mix.run(args, flood, {"bench": "tenant_flood", "flood": args.flood}))
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
