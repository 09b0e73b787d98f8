"""Each kill switch, turned off at runtime through the control topic, shows its effect in the numbers: the same kind
of request is sent once with the switch on and once with it off (fresh ids and content, so no cache answers across
rounds unless the test wants it), and the decisions, dead letters and usage events of the two rounds differ the way
the switch says. One pipeline serves the module (real broker, stage process, scoring worker with MiniLM)."""

import asyncio
import time

import orjson
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer

from schemas.records import Control, Decision, Rejection, UsageBatch
from schemas.topics import name
from streams.core.switches import SWITCHES, switch_record
from streams.runtime.control import publish
from streams.text import tokens
from workers.analytics.scrape import labelled_samples as samples
from workers.cli.commands.report import current_switches
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
HOUR = 3600.0


class Follower:
    """Decisions, dead letters, review and usage, by request id, read from the start of each topic."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.decisions: dict[str, Decision] = {}
        self.reviewed: dict[str, Decision] = {}
        self.rejected: dict[str, Rejection] = {}
        self.usage: dict[str, list] = {}
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        consumer = AIOKafkaConsumer(
            name("decisions"),
            name("rejected"),
            name("review"),
            name("usage"),
            group_id=None,
            bootstrap_servers=self.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=20,
            max_partition_fetch_bytes=16 << 20,
        )
        await consumer.start()
        try:
            while not self.stopping.is_set():
                for tp, msgs in (await consumer.getmany(timeout_ms=200)).items():
                    for msg in msgs:
                        if tp.topic == name("usage"):
                            for event in UsageBatch.loads(msg.value).events:
                                self.usage.setdefault(event.request_id, []).append(event)
                        elif tp.topic == name("rejected"):
                            r = Rejection.loads(msg.value)
                            self.rejected[r.request_id] = r
                        else:
                            d = Decision.loads(msg.value)
                            (self.decisions if tp.topic == name("decisions") else self.reviewed)[d.request_id] = d
        finally:
            await consumer.stop()

    def answered(self, rid: str) -> bool:
        return rid in self.decisions or rid in self.rejected or rid in self.reviewed


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live(tmp_path_factory):
    from streams import settings as settings_mod

    # L2 serves on a fixed threshold here: with learned thresholds (the default) a fresh partition serves no L2 hit
    # until shadow verdicts certify one (tests/streams/cache/test_learning.py), and this shows the switch's effect
    settings = settings_mod.load().replace(
        data_dir=str(tmp_path_factory.mktemp("switches") / "jev"), cache_max_error=0.0
    )
    async with Pipeline(settings, known_decision_types(), stages_process=True, metrics=True) as pipe:
        follower = Follower(pipe.settings.bootstrap)
        following = asyncio.create_task(follower.run())
        try:
            yield pipe, follower
        finally:
            follower.stopping.set()
            await following


async def send(live, bodies: list[dict], tag: str, timeout: float = 120.0) -> list[str]:
    """Publish `bodies` as requests `<tag>-<i>` (in order, one at a time where order matters to a session) and wait
    until each has a decision, a dead letter or a review; returns the ids."""
    pipe, follower = live
    ids = [f"{tag}-{i}" for i in range(len(bodies))]
    base = {"tenant": "acme", "service": "switch-test", "created_at": time.time()}
    await pipe.publish([orjson.dumps({**base, **body, "request_id": rid}) for rid, body in zip(ids, bodies)])
    deadline = time.monotonic() + timeout
    while not all(follower.answered(rid) for rid in ids) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    missing = [rid for rid in ids if not follower.answered(rid)]
    assert not missing, f"{tag}: no answer for {missing}"
    await asyncio.sleep(1.0)  # usage of the last ones (the postprocess event follows the decision)
    return ids


async def switch(live, key: str, on: bool) -> None:
    await publish(live[0].settings.bootstrap, [switch_record(key, on)])
    await asyncio.sleep(1.5)  # every process polls the control topic every 200 ms


async def shown_off(live, key: str) -> None:
    """Every process of the pipeline shows the switch off in jev_switch_on, and `jev report` shows it off."""
    shown = {
        proc: samples(text).get(f'jev_switch_on{{switch="{key}"}}')
        for proc, text in (await asyncio.to_thread(live[0].scrape_metrics)).items()
    }
    assert len(shown) == 2 and all(v == 0 for v in shown.values()), f"{key} off, metrics show {shown}"
    reported = await asyncio.to_thread(current_switches, live[0].settings)  # what `jev report` shows
    assert reported[key] is False and sum(not on for on in reported.values()) <= 2


async def off_round(live, key: str, bodies_on: list[dict], bodies_off: list[dict], tag: str):
    """The bodies sent with `key` on, then (switch off) the others; the switch is on again afterwards."""
    on = await send(live, bodies_on, f"{tag}-on")
    await switch(live, key, False)
    try:
        off = await send(live, bodies_off, f"{tag}-off")
        await shown_off(live, key)
    finally:
        await switch(live, key, True)
    return on, off


def ranking(query: str, n: int = 5, words: bool = False, **extra) -> dict:
    """A ranking request; its state is the query in words (what L2 and L3 match) only when `words`, else a
    structured state that only the exact cache can answer."""
    items = [
        "carbon plate marathon racing shoe",
        "heavy leather hiking boot with steel toe",
        "cushioned daily trainer for long runs",
        "minimalist barefoot sandal",
        "trail running shoe with grip",
        "waterproof winter boot",
        "indoor court shoe for squash",
        "lightweight tempo shoe with foam",
        "orthopedic walking shoe",
        "spiked sprint shoe for the track",
    ]
    return {
        "decision_type": "ranking",
        "state": f"Shopper query: {query}" if words else {"shopper_query": query},
        "candidates": [{"id": f"c{i}", "text": t} for i, t in enumerate(items[:n])],
        **extra,
    }


def conversation(topic: str) -> dict:
    """A customer-service request with a long multi-turn history: repeated turns (dedup), chit-chat and venting
    (semantic), old turns (time, under the policy's budget) and off-domain chatter (domain)."""
    now = time.time()
    history = []
    for i in range(24):  # over the customer_service policy's 1,536-token budget: every layer has work to do
        history += [
            {
                "role": "user",
                "content": f"My order {topic}{i} arrived with a damaged box; I need a refund for the blender I bought.",
                "ts": now - 9 * 24 * HOUR + i,
            },
            {
                "role": "assistant",
                "content": f"Sorry about order {topic}{i}. I opened a refund request for "
                f"the damaged blender; it takes 3 days.",
                "ts": now - 9 * 24 * HOUR,
            },
        ]
    history += [
        {
            "role": "user",
            "content": f"Please check order {topic}: the delivery is late and the invoice is wrong.",
            "ts": now - HOUR,
        }
    ] * 3
    history += [
        {
            "role": "user",
            "content": "Did you see the football yesterday? The weather was awful, the lottery "
            "draw and my horoscope were on TV, football football weather.",
            "ts": now - 0.5 * HOUR,
        },
        {"role": "user", "content": "haha thanks so much, you are great! :) lol", "ts": now - 0.4 * HOUR},
        {
            "role": "user",
            "content": "ugh this is so frustrating, I hate waiting, everything always goes wrong!!!",
            "ts": now - 0.3 * HOUR,
        },
        {"role": "user", "content": f"Which option fits my late delivery of order {topic}?", "ts": now - 60},
    ]
    return {
        "decision_type": "customer_service",
        "session_id": f"cs-{topic}",
        "state": {"order": topic, "issue": "late delivery"},
        "history": history,
        "contracts": {"max_input_tokens": 4000},
        "candidates": [
            {"id": "refund", "text": "refund the order now"},
            {"id": "reship", "text": "ship a replacement by express"},
            {"id": "wait", "text": "ask the customer to wait two more days"},
        ],
    }


def saved_by(follower: Follower, ids: list[str], layer: str) -> int:
    return sum(
        e.nominal_tokens
        for rid in ids
        for e in follower.usage.get(rid, ())
        if e.stage == "distill" and e.stack.endswith(f";{layer}")
    )


def tiers(follower: Follower, ids: list[str]) -> list[str]:
    return [follower.decisions[rid].tier for rid in ids if rid in follower.decisions]


def context_tokens(follower: Follower, ids: list[str]) -> int:
    """Tokens of the context each request sends with every candidate: its decisions' nominal_tokens (counted in the
    request's model; the MiniLM fine tier reads at most 256 tokens of a context, so its input tokens stop
    growing with the context long before these do)."""
    decisions = [follower.decisions[rid] for rid in ids]
    assert all(d.tier in ("coarse", "fine", "llm") for d in decisions), [d.tier for d in decisions]
    return sum(d.nominal_tokens for d in decisions)


def input_tokens(follower: Follower, ids: list[str]) -> int:
    """Input tokens of the model tiers' decisions on `ids` (none of which a cache or a rule may have answered)."""
    decisions = [follower.decisions[rid] for rid in ids]
    assert all(d.tier in ("coarse", "fine", "llm") for d in decisions), [d.tier for d in decisions]
    return sum(d.input_tokens for d in decisions)


DISTILL_LAYERS = ["dedup", "domain", "semantic", "time"]


async def test_every_switch_has_a_test_here():
    tested = {f"distill.{layer}" for layer in DISTILL_LAYERS} | {
        n.removeprefix("test_").removesuffix("_off").replace("__", ".")
        for n in globals()
        if n.startswith("test_") and n.endswith("_off") and "__" in n
    }
    assert tested == set(SWITCHES)


async def test_ingest__truncation_off(live):
    history = [
        {"role": "user", "content": f"turn {i}: I train for a long marathon season with many races."} for i in range(30)
    ]
    long = ranking("shoes for a marathon", history=history, contracts={"max_input_tokens": 120})
    on, off = await off_round(live, "ingest.truncation", [long], [long], "trunc")
    follower = live[1]
    assert on[0] in follower.decisions  # truncated to its contract and decided
    assert follower.rejected[off[0]].reason == "over_contract"


async def test_ingest__budgets_off(live):
    pipe, follower = live
    await publish(
        pipe.settings.bootstrap,
        [Control(kind="budget", key="service:budget-test", value={"hard_tokens": 1}, ts=time.time())],
    )
    await asyncio.sleep(1.5)
    try:
        on, off = await off_round(
            live,
            "ingest.budgets",
            [ranking("budget shoes a", service="budget-test")],
            [ranking("budget shoes b", service="budget-test")],
            "budget",
        )
    finally:
        await publish(
            pipe.settings.bootstrap, [Control(kind="budget", key="service:budget-test", value={}, ts=time.time())]
        )
    assert follower.rejected[on[0]].reason == "over_budget"
    assert off[0] in follower.decisions


def notes(topic: str) -> dict:
    """A customer-service request whose history is 80 distinct notes over 20 days: the semantic layer folds all but
    the latest; with it off, the time layer keeps the freshest under the policy's budget."""
    now = time.time()
    history = [
        {
            "role": "user",
            "content": f"Note {i} on {topic}: parcel {1000 + i} left the Lyon hub at {i % 24}:00 "
            f"with {i * 3} items, invoice INV-{i:04d} attached.",
            "ts": now - (80 - i) * 6 * HOUR,
        }
        for i in range(80)
    ]
    history.append({"role": "user", "content": f"Which option fits my late delivery of {topic}?", "ts": now - 60})
    return {**conversation(topic), "history": history}


@pytest.mark.parametrize("layer", DISTILL_LAYERS)
async def test_distill_layer_off(live, layer):
    """Each layer saves tokens while on (a usage event of its own), none while off, and the request then sends a
    longer context with each candidate. A layer acts only where the history is over the policy's budget when its turn
    comes: the time layer is shown with the semantic layer off in both rounds (else semantic folding leaves it
    nothing)."""
    body = notes if layer == "time" else conversation
    if layer == "time":
        await switch(live, "distill.semantic", False)
    try:
        on, off = await off_round(
            live, f"distill.{layer}", [body(f"{layer}-on")], [body(f"{layer}-off")], f"distill-{layer}"
        )
    finally:
        await switch(live, "distill.semantic", True)
    follower = live[1]
    assert saved_by(follower, on, layer) > 0
    assert saved_by(follower, off, layer) == 0
    assert context_tokens(follower, off) > context_tokens(follower, on)


async def test_cache__l1_off(live):
    first = [ranking(f"l1 shoes {i}") for i in range(3)]
    await send(live, first, "l1-fill")
    on, off = await off_round(live, "cache.l1", first, first, "l1")
    follower = live[1]
    assert tiers(follower, on) == ["cache_l1"] * 3
    assert "cache_l1" not in tiers(follower, off)


async def test_cache__l2_off(live):
    await send(live, [ranking("quiet coffee machine for a small office", words=True)], "l2-fill")
    on, off = await off_round(
        live,
        "cache.l2",
        [ranking("a quiet coffee machine for my small office", words=True)],
        [ranking("quiet coffee machine for a small office, please", words=True)],
        "l2",
    )
    follower = live[1]
    assert tiers(follower, on) == ["cache_l2"]
    assert "cache_l2" not in tiers(follower, off)


async def l3_round(live, tag: str) -> list[str]:
    """Sessions that ask one question, then (once answered) the same follow-up, over five candidates; then a
    session that asks the first over six: the follow-up has been seen often enough to pre-answer, and nothing
    answers it yet over those six (a cached answer holds for its own candidate set only). Returns the last id."""
    first, then = f"{tag} shoes for a rainy marathon", f"{tag} shoes for a rainy half marathon"
    sessions = [f"{tag}-{s}" for s in range(3)]
    await send(live, [ranking(first, words=True, session_id=s) for s in sessions], f"{tag}-first")
    await send(live, [ranking(then, words=True, session_id=s) for s in sessions], f"{tag}-then")
    return await send(live, [ranking(first, n=6, words=True, session_id=f"{tag}-last")], f"{tag}-last")


async def test_cache__l3_off(live):
    follower = live[1]

    def pre_answers(ids) -> list:
        return [rid for rid in follower.usage if "~l3~" in rid and rid.split("~l3~")[0] in ids]

    on = await l3_round(live, "l3on")
    await asyncio.sleep(3.0)  # the pre-answer is scored after the request it follows is answered
    await switch(live, "cache.l3", False)
    try:
        off = await l3_round(live, "l3off")
        await shown_off(live, "cache.l3")
        await asyncio.sleep(3.0)
    finally:
        await switch(live, "cache.l3", True)
    assert pre_answers(on)
    assert not pre_answers(off)


def risky(amount: int) -> dict:
    return {
        "decision_type": "risk_interception",
        "state": {"risk_score": 0.99, "amount": amount, "merchant": "gift card shop"},
        "candidates": [
            {"id": a, "text": t}
            for a, t in [
                ("allow", "approve the payment"),
                ("review", "hold for manual review"),
                ("block", "decline and lock the card"),
            ]
        ],
    }


async def test_score__rules_off(live):
    on, off = await off_round(live, "score.rules", [risky(5401), risky(5402)], [risky(5403), risky(5404)], "rules")
    follower = live[1]
    assert tiers(follower, on) == ["rules", "rules"]
    assert "rules" not in tiers(follower, off)
    assert sum(follower.decisions[rid].input_tokens for rid in on) == 0
    assert input_tokens(follower, off) > 0


async def test_score__cascade_off(live):
    on, off = await off_round(
        live,
        "score.cascade",
        [ranking("cascade shoes for a tempo run", n=10)],
        [ranking("cascade shoes for an easy run", n=10)],
        "cascade",
    )
    follower = live[1]

    def fine(ids) -> list:
        return [e for rid in ids for e in follower.usage[rid] if e.stage == "score" and e.stack.endswith(";fine")]

    assert all(e.candidates < 10 for e in fine(on)) and fine(on)
    assert [e.candidates for e in fine(off)] == [10]  # the fine tier scored every candidate
    assert input_tokens(follower, off) > input_tokens(follower, on)


def generated(text: str) -> dict:
    return {"decision_type": "customer_service", "kind": "generate", "state": text}


async def test_postprocess__cleanup_off(live):
    text = (
        "Sure! Here is a quick summary of the case.\nThe parcel for order {n} is delayed at the Lyon hub; the "
        "refund was approved on Monday.\nHope this helps! Let me know if you have any other questions."
    )
    on, off = await off_round(
        live, "postprocess.cleanup", [generated(text.format(n=1))], [generated(text.format(n=2))], "cleanup"
    )
    follower = live[1]

    def sent(rid: str) -> int:
        return tokens.count(follower.decisions[rid].text, "gpt-4o-mini")

    assert sent(on[0]) < follower.decisions[on[0]].output_tokens  # the closer was cut
    assert sent(off[0]) == follower.decisions[off[0]].output_tokens  # as generated


SUBJECTS = [
    ("When do the parcels leave the Lyon hub?", "Parcel {i} for depot {d} leaves the Lyon hub within {i} hours."),
    (
        "Which invoices does the Madrid office still owe?",
        "Invoice {i} of supplier {d} is owed {i}00 euros by the Madrid office.",
    ),
]


def streamed(n: int) -> dict:
    """A creative answer streamed to a mobile client: 512 tokens in 32-token chunks, paced at 256 tokens/s
    (stream.yaml) while the throttle is on. Each `n` asks about another subject, so no cache answers it."""
    question, line = SUBJECTS[n]
    lines = "\n".join(line.format(i=i, d=i % 5) for i in range(60))
    return {
        "decision_type": "customer_service",
        "kind": "generate",
        "stream": True,
        "client": "mobile",
        "question_type": "creative",
        "state": f"{question}\n{lines}",
        "contracts": {"max_output_tokens": 512},
    }


async def stream_row(follower: Follower, rid: str, timeout: float = 15.0):
    """The one usage row of a streamed answer (`score;stream`), once the follower has read it."""
    deadline = time.monotonic() + timeout
    while not (rows := [e for e in follower.usage.get(rid, ()) if e.event_id.endswith(":score:stream")]):
        assert time.monotonic() < deadline, f"no stream usage row for {rid}: {follower.usage.get(rid)}"
        await asyncio.sleep(0.2)
    [row] = rows
    return row


async def test_postprocess__throttle_off(live):
    on, off = await off_round(live, "postprocess.throttle", [streamed(0)], [streamed(1)], "throttle")
    paced, unpaced = await stream_row(live[1], on[0]), await stream_row(live[1], off[0])
    assert paced.output_tokens >= 256 and unpaced.output_tokens >= 256  # many chunks each
    assert paced.tokens_per_s <= 256 * 16 / 15 * 1.05  # the bucket holds one chunk: 16 waits for 15 chunks' worth
    assert unpaced.tokens_per_s > 1000, unpaced.tokens_per_s


async def test_postprocess__scan_off(live):
    text = "The attached file is strictly confidential and internal use only: the refund for order {n} is approved."
    on, off = await off_round(
        live, "postprocess.scan", [generated(text.format(n=1))], [generated(text.format(n=2))], "scan"
    )
    follower = live[1]
    assert on[0] in follower.reviewed and on[0] not in follower.decisions
    assert off[0] in follower.decisions and "review:skipped" in follower.decisions[off[0]].chain
