"""The bundled demo workload: realistic decision requests of three kinds, with repeats and bad input."""
from __future__ import annotations

import random
import time
import zlib

import orjson

WAREHOUSES = ["Berlin", "Lyon", "Milan", "Warsaw", "Madrid", "Rotterdam", "Prague", "Vienna"]
PRODUCTS = ["running shoes", "espresso machine", "winter jacket", "noise-cancelling headphones", "yoga mat",
            "cordless drill", "baby stroller", "gaming laptop", "air purifier", "camping tent"]
MERCHANTS = ["electronics store", "online travel agency", "grocery chain", "crypto exchange", "gift card shop",
             "fuel station", "luxury boutique", "food delivery app"]
QUERIES = [
    ("lightweight shoes for marathon training", ["carbon plate marathon racing shoe, 190 g",
     "heavy leather hiking boot with steel toe", "cushioned daily trainer for long runs",
     "minimalist barefoot sandal", "trail running shoe with aggressive grip"]),
    ("quiet coffee machine for a small office", ["compact espresso machine with low-noise pump",
     "industrial 3-group espresso machine for cafes", "manual pour-over kettle",
     "bean-to-cup machine with silent grinder for offices", "stovetop moka pot"]),
    ("warm jacket for skiing in very cold weather", ["insulated waterproof ski jacket rated to -30C",
     "light cotton summer blazer", "down parka with hood for extreme cold", "rain poncho",
     "softshell running vest"]),
    ("headphones for long flights", ["over-ear noise-cancelling headphones with 30 h battery",
     "open-back studio headphones", "wired earbuds for kids", "bone conduction sport headphones",
     "in-ear noise-cancelling earbuds with travel case"]),
]
RISK_ACTIONS = [("allow", "approve the payment without friction"),
                ("step_up", "require 3-D Secure or a one-time password before approving"),
                ("review", "hold the payment for manual review by the fraud team"),
                ("block", "decline the payment and lock the card")]


def inventory(rng: random.Random, i: int) -> dict:
    product = rng.choice(PRODUCTS)
    stock = {w: rng.randint(0, 400) for w in rng.sample(WAREHOUSES, 5)}
    short = min(stock, key=stock.get)
    cover = rng.choice([3, 7, 12, 45])
    candidates = [{"id": "hold", "text": "keep stock where it is and reorder from the supplier"}]
    candidates += [{"id": f"from-{w.lower()}", "text": f"transfer {product} from {w} ({n} units) to {short}"}
                   for w, n in stock.items() if w != short]
    return {"decision_type": "inventory_transfer", "service": "supply-chain", "business_line": "retail",
            "business_event": "transfer_order",
            "state": {"product": product, "short_warehouse": short, "stock": stock, "days_of_cover": cover,
                      "note": f"{short} will run out of {product} in {cover} days at the current sell-through"},
            "candidates": candidates}


def risk(rng: random.Random, i: int) -> dict:
    score = rng.choice([0.01, 0.02, 0.3, 0.55, 0.7, 0.97, 0.99])
    amount = rng.choice([25, 80, 450, 1200, 5400])
    merchant = rng.choice(MERCHANTS)
    history = [{"role": "system", "content": f"Card holder since {rng.randint(2012, 2024)}; "
                                             f"{rng.randint(0, 3)} chargebacks in the last year."},
               {"role": "user", "content": f"Payment of {amount} EUR at a {merchant} from a new device "
                                           f"in {rng.choice(WAREHOUSES)}."}]
    return {"decision_type": "risk_interception", "service": "payments", "business_line": "fintech",
            "business_event": "payment_screened", "history": history,
            "state": {"risk_score": score, "amount": amount, "merchant": merchant,
                      "summary": f"{amount} EUR at a {merchant}, model risk score {score}"},
            "candidates": [{"id": a, "text": t} for a, t in RISK_ACTIONS]}


def ranking(rng: random.Random, i: int) -> dict:
    query, items = rng.choice(QUERIES)
    candidates = [{"id": f"sku-{zlib.crc32(t.encode()) % 100000:05d}", "text": t} for t in items]
    rng.shuffle(candidates)
    return {"decision_type": "ranking", "service": "search", "business_line": "marketplace",
            "business_event": "search_session", "state": f"Shopper query: {query}",
            "history": [{"role": "user", "content": f"I am looking for {query}."}], "candidates": candidates}


KINDS = [(inventory, 0.3), (risk, 0.4), (ranking, 0.3)]
BAD_INPUTS = [b"{not json", b'{"request_id": "bad-1"}', b'{"request_id": 7, "tenant": "acme"}',
              b'{"request_id":"bad-2","tenant":"acme","service":"s","decision_type":"astrology","state":"x"}']


def generate(n: int, seed: int = 7, repeat_share: float = 0.3, tenant: str = "acme") -> list[bytes]:
    """n requests as the bytes upstream would publish; `repeat_share` of them repeat an earlier one."""
    rng = random.Random(seed)
    out, originals = [], []
    for i in range(n):
        if originals and rng.random() < repeat_share:
            body = dict(rng.choice(originals))
        else:
            make = rng.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]
            body = make(rng, i)
            originals.append(body)
        session = f"s-{rng.randint(1, max(1, n // 8))}"
        out.append(orjson.dumps({**body, "request_id": f"r-{seed}-{i}", "tenant": tenant, "session_id": session,
                                 "user_id": f"u-{session[2:]}", "created_at": time.time()}))
    return out
