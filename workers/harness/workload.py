"""The bundled demo workload: realistic decision requests of three kinds (and Chinese customer-service tickets),
with repeats and bad input."""

from __future__ import annotations

import random
import time
import zlib

import orjson

WAREHOUSES = ["Berlin", "Lyon", "Milan", "Warsaw", "Madrid", "Rotterdam", "Prague", "Vienna"]
PRODUCTS = [
    "running shoes",
    "espresso machine",
    "winter jacket",
    "noise-cancelling headphones",
    "yoga mat",
    "cordless drill",
    "baby stroller",
    "gaming laptop",
    "air purifier",
    "camping tent",
]
MERCHANTS = [
    "electronics store",
    "online travel agency",
    "grocery chain",
    "crypto exchange",
    "gift card shop",
    "fuel station",
    "luxury boutique",
    "food delivery app",
]
QUERIES = [
    (
        "lightweight shoes for marathon training",
        [
            "carbon plate marathon racing shoe, 190 g",
            "heavy leather hiking boot with steel toe",
            "cushioned daily trainer for long runs",
            "minimalist barefoot sandal",
            "trail running shoe with aggressive grip",
        ],
    ),
    (
        "quiet coffee machine for a small office",
        [
            "compact espresso machine with low-noise pump",
            "industrial 3-group espresso machine for cafes",
            "manual pour-over kettle",
            "bean-to-cup machine with silent grinder for offices",
            "stovetop moka pot",
        ],
    ),
    (
        "warm jacket for skiing in very cold weather",
        [
            "insulated waterproof ski jacket rated to -30C",
            "light cotton summer blazer",
            "down parka with hood for extreme cold",
            "rain poncho",
            "softshell running vest",
        ],
    ),
    (
        "headphones for long flights",
        [
            "over-ear noise-cancelling headphones with 30 h battery",
            "open-back studio headphones",
            "wired earbuds for kids",
            "bone conduction sport headphones",
            "in-ear noise-cancelling earbuds with travel case",
        ],
    ),
]
RISK_ACTIONS = [
    ("allow", "approve the payment without friction"),
    ("step_up", "require 3-D Secure or a one-time password before approving"),
    ("review", "hold the payment for manual review by the fraud team"),
    ("block", "decline the payment and lock the card"),
]


def inventory(rng: random.Random, i: int) -> dict:
    product = rng.choice(PRODUCTS)
    stock = {w: rng.randint(0, 400) for w in rng.sample(WAREHOUSES, 5)}
    short = min(stock, key=stock.get)
    cover = rng.choice([3, 7, 12, 45])
    candidates = [{"id": "hold", "text": "keep stock where it is and reorder from the supplier"}]
    candidates += [
        {"id": f"from-{w.lower()}", "text": f"transfer {product} from {w} ({n} units) to {short}"}
        for w, n in stock.items()
        if w != short
    ]
    return {
        "decision_type": "inventory_transfer",
        "service": "supply-chain",
        "business_line": "retail",
        "business_event": "transfer_order",
        "state": {
            "product": product,
            "short_warehouse": short,
            "stock": stock,
            "days_of_cover": cover,
            "note": f"{short} will run out of {product} in {cover} days at the current sell-through",
        },
        "candidates": candidates,
    }


def risk(rng: random.Random, i: int) -> dict:
    score = rng.choice([0.01, 0.02, 0.3, 0.55, 0.7, 0.97, 0.99])
    amount = rng.choice([25, 80, 450, 1200, 5400])
    merchant = rng.choice(MERCHANTS)
    history = [
        {
            "role": "system",
            "content": f"Card holder since {rng.randint(2012, 2024)}; "
            f"{rng.randint(0, 3)} chargebacks in the last year.",
        },
        {
            "role": "user",
            "content": f"Payment of {amount} EUR at a {merchant} from a new device in {rng.choice(WAREHOUSES)}.",
        },
    ]
    return {
        "decision_type": "risk_interception",
        "service": "payments",
        "business_line": "fintech",
        "business_event": "payment_screened",
        "history": history,
        "state": {
            "risk_score": score,
            "amount": amount,
            "merchant": merchant,
            "summary": f"{amount} EUR at a {merchant}, model risk score {score}",
        },
        "candidates": [{"id": a, "text": t} for a, t in RISK_ACTIONS],
    }


OPENERS = [
    "{q}",
    "I need {q}",
    "looking for {q}",
    "show me {q}",
    "searching for {q}",
    "I want {q}",
    "find {q}",
    "where can I buy {q}",
    "need {q}",
    "any {q}?",
    "recommend {q}",
    "please find {q}",
    "suggest {q}",
    "shopping for {q}",
    "help me find {q}",
    "do you have {q}",
]
CLOSERS = ["", " please", ", thanks", " for me", " today", ", any ideas?", " - what do you suggest?", " asap"]
OTHER_WORDS = {  # each ranking query in other words: the same intent, which L1 cannot match and L2 may
    "lightweight shoes for marathon training": [
        "light shoes for marathon training",
        "lightweight running shoes to train for a marathon",
        "lightweight marathon training shoes",
    ],
    "quiet coffee machine for a small office": [
        "silent coffee maker for a small office",
        "low-noise espresso machine for a small office",
        "quiet office coffee machine",
    ],
    "warm jacket for skiing in very cold weather": [
        "warm ski jacket for very cold weather",
        "jacket that keeps me warm skiing in freezing cold",
        "very warm skiing jacket for cold weather",
    ],
    "headphones for long flights": [
        "headphones for long-haul flights",
        "headphones to wear on long flights",
        "comfortable headphones for long flights",
    ],
}
# The same searches asked in Chinese, over the catalogue's Chinese texts of the same items (same SKU ids, in the
# order of QUERIES): a marketplace that serves both languages.
ZH_SEARCHES = {
    "lightweight shoes for marathon training": (
        ["适合马拉松训练的轻便跑鞋", "马拉松训练用的轻量跑鞋", "练马拉松穿的轻便鞋子", "轻一点的马拉松训练鞋"],
        [
            "碳板马拉松竞速跑鞋，190克",
            "钢头厚重皮质登山靴",
            "适合长跑的缓震日常训练鞋",
            "极简赤足凉鞋",
            "抓地力强的越野跑鞋",
        ],
    ),
    "quiet coffee machine for a small office": (
        ["适合小办公室的静音咖啡机", "小办公室用的低噪音咖啡机", "安静一点的办公室咖啡机", "声音小的小型办公室咖啡机"],
        [
            "低噪音泵的小型意式咖啡机",
            "咖啡馆用的三头商用意式咖啡机",
            "手冲咖啡壶",
            "带静音磨豆的办公室全自动咖啡机",
            "炉灶用摩卡壶",
        ],
    ),
    "warm jacket for skiing in very cold weather": (
        [
            "严寒天气滑雪穿的保暖外套",
            "特别冷的天气滑雪用的保暖夹克",
            "极寒天气穿的滑雪保暖服",
            "很冷的时候滑雪穿的暖和外套",
        ],
        ["零下30度防水保暖滑雪服", "轻薄棉质夏季西装外套", "极寒带帽羽绒派克大衣", "雨披", "软壳跑步背心"],
    ),
    "headphones for long flights": (
        ["长途飞行用的耳机", "坐长途飞机戴的耳机", "适合长途航班的耳机", "长时间坐飞机用的舒适耳机"],
        [
            "续航30小时的头戴式降噪耳机",
            "开放式录音室耳机",
            "儿童有线耳塞",
            "骨传导运动耳机",
            "带旅行收纳盒的入耳式降噪耳机",
        ],
    ),
}
ZH_OPENERS = [
    "{q}",
    "我想买{q}",
    "帮我找{q}",
    "有没有{q}",
    "推荐一下{q}",
    "求推荐{q}",
    "想要{q}",
    "请帮我找{q}",
    "哪里能买到{q}",
    "给我看看{q}",
    "我在找{q}",
    "搜一下{q}",
]
ZH_CLOSERS = ["", "，谢谢", "？", "，急用", "，麻烦了", "，有推荐吗？"]


def reworded(body: dict, rng: random.Random, chinese: bool = False) -> dict:
    """A ranking request asked again in other words (same candidates, same intent): an opener, one of the query's
    wordings and a closer, about 500 wordings a query (so a reworded search is mostly new to L1, which answers
    only the very same text); `chinese`: asked in Chinese over the same items' Chinese texts (about 290 wordings)."""
    query = body["state"].removeprefix("Shopper query: ")
    if chinese:
        wordings, texts = ZH_SEARCHES[query]
        words = rng.choice(ZH_OPENERS).format(q=rng.choice(wordings)) + rng.choice(ZH_CLOSERS)
        zh = dict(zip(next(items for q, items in QUERIES if q == query), texts))
        return {
            **body,
            "state": f"顾客搜索：{words}",
            "history": [{"role": "user", "content": words}],
            "candidates": [{**c, "text": zh[c["text"]]} for c in body["candidates"]],
        }
    words = rng.choice(OPENERS).format(q=rng.choice([query, *OTHER_WORDS[query]])) + rng.choice(CLOSERS)
    return {**body, "state": f"Shopper query: {words}", "history": [{"role": "user", "content": f"{words}."}]}


def ranking(rng: random.Random, i: int) -> dict:
    query, items = rng.choice(QUERIES)
    candidates = [{"id": f"sku-{zlib.crc32(t.encode()) % 100000:05d}", "text": t} for t in items]
    rng.shuffle(candidates)
    return {
        "decision_type": "ranking",
        "service": "search",
        "business_line": "marketplace",
        "business_event": "search_session",
        "state": f"Shopper query: {query}",
        "history": [{"role": "user", "content": f"I am looking for {query}."}],
        "candidates": candidates,
    }


FACT_QUESTIONS = [
    "How long does delivery of the {p} to {w} take?",
    "Can I return the {p} after 30 days?",
    "Which warehouse ships the {p} fastest?",
    "What does the warranty of the {p} cover?",
]
CREATIVE_QUESTIONS = [
    "Write a short apology letter to a customer whose {p} arrived late in {w}.",
    "Write a friendly poem announcing new {p} stock in {w}.",
    "Compose a slogan for the {p} sale in {w}.",
]
# The store's support policy: the one reference every English support question is answered from (a system turn
# ahead of the question), so consecutive prompts to a model server share all of it and a server that reuses the
# longest cached prefix (llama.cpp, vLLM's prefix caching) reads only the question of each. About 300 tokens.
POLICY = (
    "Store support policy:\n"
    "Orders leave the warehouse within 24 hours of payment; orders paid on Saturday or Sunday leave on Monday.\n"
    "Standard delivery takes 2 working days from Berlin, Prague and Vienna, 3 from Lyon, Milan, Rotterdam and "
    "Warsaw, and 4 from Madrid; express delivery takes 1 working day from every warehouse and costs 9 EUR.\n"
    "An order ships from the nearest warehouse that holds the product; when none near the customer holds it, "
    "from Rotterdam, the central warehouse.\n"
    "Returns are accepted within 30 days of delivery when the item is unused and in its original box; after "
    "30 days only faulty items are taken back. Refunds reach the card within 5 working days.\n"
    "Electronics (espresso machines, headphones, cordless drills, gaming laptops, air purifiers) carry a "
    "2-year warranty and everything else a 1-year warranty, covering manufacturing defects, not wear or "
    "accidents.\n"
    "Customers can collect an order from the warehouse counter on weekdays from 9:00 to 18:00.\n"
    "A delivery more than 2 days late earns a 10 EUR voucher on the next order.\n"
    "Stock in every warehouse is replenished weekly from the central supplier.\n"
    "Support answers within 4 hours by chat and within 2 days by e-mail."
)


def support(rng: random.Random, i: int) -> dict:
    """A customer-service question answered by generation and streamed (to a web or mobile client), from the
    store's support policy (a system turn: the same for every question); half declare their question type, the
    rest are classified by rules (on the question, the state)."""
    product, warehouse = rng.choice(PRODUCTS), rng.choice(WAREHOUSES)
    creative = rng.random() < 0.4
    question = rng.choice(CREATIVE_QUESTIONS if creative else FACT_QUESTIONS).format(p=product, w=warehouse)
    body = {
        "decision_type": "customer_service",
        "service": "support",
        "business_line": "retail",
        "business_event": "support_answer",
        "kind": "generate",
        "stream": True,
        "client": "mobile" if rng.random() < 0.3 else "web",
        "contracts": {"max_output_tokens": 512},
        "history": [{"role": "system", "content": POLICY}],
        "state": question,
    }
    if rng.random() < 0.5:
        body["question_type"] = "creative" if creative else "fact"
    return body


ZH_QUESTIONS = [
    "{p}从{c}发货要多久才能送到？",
    "{p}买了超过30天还能退货吗？",
    "{p}的保修包括哪些内容？",
    "{c}的顾客可以到仓库自提{p}吗？",
]
POLICY_ZH = (
    "本店客服政策：\n"
    "订单在付款后24小时内从仓库发出，周六、周日付款的订单在周一发出。\n"
    "北京、上海、杭州发出的普通快递需要2个工作日，广州、深圳、武汉需要3个工作日，成都、西安需要4个工作日；"
    "加急快递从任何仓库发出都只需1个工作日，运费60元。\n"
    "商品在未使用且包装完好的情况下，签收后15天内可以退货；超过15天只接受质量问题退货，退款在5个工作日内原路退回。\n"
    "蓝牙耳机、电饭煲、扫地机器人、空气净化器享有2年保修，其他商品享有1年保修，覆盖制造缺陷，不包括磨损或意外损坏。\n"
    "顾客可以在工作日9:00至18:00到仓库柜台自提订单。\n"
    "快递延误超过2天，下次购物可获得20元优惠券。\n"
    "客服通过在线聊天在4小时内回复，通过电子邮件在2天内回复。"
)


def support_zh_answer(rng: random.Random, body: dict) -> dict:
    """The support question of `body` asked in Chinese instead, answered from the store's Chinese support policy
    (streamed the same)."""
    product, city = rng.choice(ZH_PRODUCTS), rng.choice(ZH_CITIES)
    question = rng.choice(ZH_QUESTIONS).format(p=product, c=city)
    body = {**body, "service": "support-zh", "history": [{"role": "system", "content": POLICY_ZH}], "state": question}
    if "question_type" in body:
        body["question_type"] = "fact"
    return body


ZH_PRODUCTS = ["蓝牙耳机", "电饭煲", "羽绒服", "扫地机器人", "运动鞋", "空气净化器", "婴儿推车", "机械键盘"]
ZH_CITIES = ["北京", "上海", "广州", "深圳", "成都", "杭州", "武汉", "西安"]
ZH_MESSAGES = [
    "我在{c}买的{p}已经{n}天了还没到，订单号{o}，能帮我查一下物流吗？",
    "收到的{p}有质量问题，开机就坏了，我要退款。订单号{o}。",
    "{p}尺码不合适，想换大一号的，可以换货吗？",
    "我的{p}少发了一件配件，麻烦补发一下，地址在{c}。",
    "买了{n}个{p}，需要开公司发票，抬头怎么填？",
    "客服你好，{p}说好{n}天内发货，到现在都没发，太失望了，我要投诉！",
]
ZH_ACTIONS = [
    ("track", "查询物流，告诉顾客包裹现在的位置和预计送达时间"),
    ("refund", "为顾客办理退款，款项原路退回"),
    ("exchange", "为顾客办理换货，寄回后发出新尺码"),
    ("resend", "补发缺少的配件，运费由商家承担"),
    ("invoice", "为顾客开具电子发票，说明抬头和税号的填写方法"),
    ("escalate", "转交投诉专员处理，并向顾客致歉"),
]


def support_zh(rng: random.Random, i: int) -> dict:
    """A Chinese customer-service message and the actions an agent can take: decided by the tiers (the fine tier
    of a non-English request is the multilingual one)."""
    message = rng.choice(ZH_MESSAGES).format(
        c=rng.choice(ZH_CITIES),
        p=rng.choice(ZH_PRODUCTS),
        n=rng.choice([3, 5, 7, 10]),
        o=f"{rng.randint(10**9, 10**10 - 1)}",
    )
    actions = list(ZH_ACTIONS)
    rng.shuffle(actions)
    return {
        "decision_type": "customer_service",
        "service": "support-zh",
        "business_line": "retail",
        "business_event": "support_ticket",
        "state": message,
        "history": [
            {"role": "user", "content": "你好，在吗？"},
            {"role": "assistant", "content": "您好，请问有什么可以帮您？"},
        ],
        "candidates": [{"id": a, "text": t} for a, t in actions],
    }


KINDS = [(inventory, 0.3), (risk, 0.4), (ranking, 0.3)]
CHECKOUT_DEADLINE_MS = 300  # a payment screened while the card authorisation waits: the caller's answer window
BAD_INPUTS = [
    b"{not json",
    b'{"request_id": "bad-1"}',
    b'{"request_id": 7, "tenant": "acme"}',
    b'{"request_id":"bad-2","tenant":"acme","service":"s","decision_type":"astrology","state":"x"}',
]


def generate(
    n: int,
    seed: int = 7,
    repeat_share: float = 0.3,
    tenant: str = "acme",
    stream_share: float = 0.0,
    deadline_share: float = 0.0,
    chinese_share: float = 0.0,
    reword_share: float = 0.0,
) -> list[bytes]:
    """n requests as the bytes upstream would publish; `repeat_share` of them repeat an earlier one,
    `stream_share` of the new ones are streamed customer-service answers, `deadline_share` of the new payment
    screenings are made at checkout, with the caller's deadline, `chinese_share` of the new decisions are Chinese
    customer-service tickets (and as large a share of the streamed questions is asked in Chinese), and
    `reword_share` of the product searches (new or repeated) are asked in other words, as large a share of them as
    `chinese_share` in Chinese (0: the same mix as before)."""
    rng = random.Random(seed)
    checkout = random.Random(f"{seed}:checkout")  # own draws: the rest of the workload is the same either way
    chinese = random.Random(f"{seed}:zh")
    answers_zh = random.Random(f"{seed}:zh-answers")  # own draws: Chinese support questions leave the rest as it was
    reword = random.Random(f"{seed}:reword")
    reword_zh = random.Random(f"{seed}:reword-zh")
    out, originals = [], []
    for i in range(n):
        if originals and rng.random() < repeat_share:
            body = dict(rng.choice(originals))
        elif stream_share and rng.random() < stream_share:
            body = support(rng, i)
            if chinese_share and answers_zh.random() < chinese_share:
                body = support_zh_answer(answers_zh, body)
            originals.append(body)
        else:
            make = rng.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]
            body = make(rng, i)
            if make is risk and checkout.random() < deadline_share:
                body["deadline_ms"] = CHECKOUT_DEADLINE_MS
            if chinese_share and chinese.random() < chinese_share:
                body = support_zh(chinese, i)
            originals.append(body)
        if reword_share and body["decision_type"] == "ranking" and reword.random() < reword_share:
            body = reworded(body, reword, chinese=bool(chinese_share) and reword_zh.random() < chinese_share)
        session = f"s-{rng.randint(1, max(1, n // 8))}"
        out.append(
            orjson.dumps(
                {
                    **body,
                    "request_id": f"r-{seed}-{i}",
                    "tenant": tenant,
                    "session_id": session,
                    "user_id": f"u-{session[2:]}",
                    "created_at": time.time(),
                }
            )
        )
    return out


def request_ids(payloads: list[bytes]) -> set[str]:
    return {orjson.loads(p)["request_id"] for p in payloads}


MODEL_PATH_TYPES = ("ranking", "inventory_transfer")  # decision types that take the model tiers once rules are off


def model_path_requests(n: int, tag: str, repeat_share: float = 0.0, seed: int = 31) -> list[bytes]:
    """n requests of the model-path decision types from the bundled workload, ids `<tag>-<i>`; `repeat_share` of
    the workload repeats an earlier request (0.3: as the demo's does), so states and candidates repeat too."""
    out = []
    for raw in generate(n * 3, seed=seed, repeat_share=repeat_share):
        body = orjson.loads(raw)
        if body["decision_type"] in MODEL_PATH_TYPES:
            out.append(orjson.dumps({**body, "request_id": f"{tag}-{len(out)}"}))
        if len(out) == n:
            return out
    raise RuntimeError("the workload gave too few model-path requests")
