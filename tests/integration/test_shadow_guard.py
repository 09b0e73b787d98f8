"""The guard's loop within one run: a deliberately loose L2 threshold → agreement falls → the guard tightens L2
(the cache stage honours each tune) or switches it off (alert + control record) → agreement recovers. Real
broker, real ClickHouse engine, a real scoring worker process; every request sampled for shadow."""

import asyncio
import random

import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from schemas.records import Alert, Control, Decision, Verdict
from schemas.topics import name
from streams.runtime.agents import shadow as shadow_agent
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration

ITEMS = {
    "shoe": "running shoe for the road",
    "coat": "warm coat for cold winter",
    "tent": "tent for camping in the woods",
    "kettle": "kettle to boil water for tea",
    "lamp": "lamp to read at night",
    "bag": "bag to carry books to school",
    "drill": "drill to make holes in a wall",
    "mat": "mat for yoga at home",
}
NEEDS = [
    "running on the road",
    "a run on the road",
    "cold winter days",
    "a cold winter",
    "camping in the woods",
    "a night camping",
    "boiling water for tea",
    "making tea",
    "reading at night",
    "a night of reading",
    "carrying books to school",
    "school books",
    "holes in a wall",
    "making holes",
    "yoga at home",
    "home yoga",
]
LOOSE = [
    "I want something for {}",
    "what should I buy for {}",
    "show me the best thing for {}",
    "help me find a thing for {}",
]
LATER = ["which item suits {}", "pick an item for {}"]


def requests(tag: str, asks: list[str], seed: int) -> list[bytes]:
    questions = [a.format(n) for n in NEEDS for a in asks]
    random.Random(seed).shuffle(questions)
    return [
        orjson.dumps(
            {
                "request_id": f"{tag}-{i}",
                "tenant": "acme",
                "service": "search",
                "decision_type": "ranking",
                "state": q,
                "candidates": [{"id": k, "text": t} for k, t in ITEMS.items()],
            }
        )
        for i, q in enumerate(questions)
    ]


class Follow:
    """Everything on the decisions, verdicts, alerts and control topics, from the start."""

    def __init__(self, bootstrap: str):
        self.bootstrap, self.stopping = bootstrap, asyncio.Event()
        self.decisions: dict[str, Decision] = {}
        self.verdicts: dict[str, Verdict] = {}
        self.alerts: list[Alert] = []
        self.controls: list[Control] = []

    async def run(self) -> None:
        topics = {
            name("decisions"): (Decision, self.decisions),
            name("verdicts"): (Verdict, self.verdicts),
            name("alerts"): (Alert, self.alerts),
            name("control"): (Control, self.controls),
        }
        consumer = AIOKafkaConsumer(
            *topics, group_id=None, bootstrap_servers=self.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            while not self.stopping.is_set():
                for tp, msgs in (await consumer.getmany(timeout_ms=200)).items():
                    kind, into = topics[tp.topic]
                    for msg in msgs:
                        record = kind.loads(msg.value)
                        if isinstance(into, dict):
                            into[record.request_id] = record
                        else:
                            into.append(record)
        finally:
            await consumer.stop()

    async def until(self, done, timeout: float = 120.0) -> bool:
        for _ in range(int(timeout / 0.2)):
            if done():
                return True
            await asyncio.sleep(0.2)
        return done()


async def waves(pipe: Pipeline, follow: Follow, payloads: list[bytes], size: int = 8) -> None:
    """Published a wave at a time, each once the one before is decided (so later questions meet L2 entries)."""
    for i in range(0, len(payloads), size):
        await pipe.publish(payloads[i : i + size])
        ids = {orjson.loads(p)["request_id"] for p in payloads[i : i + size]}
        assert await follow.until(lambda ids=ids: ids <= follow.decisions.keys()), "a wave got no decisions"


def agreement(verdicts: list[Verdict]) -> float:
    return sum(v.agreed for v in verdicts) / len(verdicts)


async def test_loose_l2_is_tightened_or_switched_off_and_agreement_recovers(
    settings, clickhouse_dsn, usage_db, monkeypatch
):
    # cache_max_error=0: the fixed L2 threshold, loose on purpose (a learner would serve no hit it cannot
    # certify). The guard acts on every 10 L2 verdicts here (min sample 10, z 1.645: 10 of 10 kept is a lower
    # bound of 0.73, under L2's floor); at its 0.02 step the loose threshold would need ~45 tightenings, so a wide
    # step fits the loop in one run: 0.05 -> 0.5 -> 0.95, then the switch (past the 0.99 limit).
    monkeypatch.setattr(shadow_agent, "L2_STEP", 0.45)
    settings = settings.replace(
        backend="lexical",
        cache_embedder="hashing",
        cache_semantic_threshold=0.05,
        cache_max_error=0.0,
        shadow_rate="1",
        shadow_min_sample=10,
        clickhouse_dsn=clickhouse_dsn,
    )
    async with Pipeline(settings, known_decision_types()) as pipe:
        follow = Follow(pipe.settings.bootstrap)
        following = asyncio.create_task(follow.run())
        try:
            loose = requests("loose", LOOSE, seed=1)
            await waves(pipe, follow, loose)

            def tuned() -> list:
                return [c.value for c in follow.controls if (c.kind, c.key) == ("tune", "cache.l2.min_similarity")]

            def switched() -> list:
                return [c for c in follow.controls if (c.kind, c.key) == ("switch", "cache.l2") and not c.value]

            def acted() -> bool:
                return bool(switched() or (tuned() and tuned()[-1] >= 0.95))

            assert await follow.until(acted), f"the guard did not tighten L2 or switch it off: {follow.controls}"
            assert tuned() == sorted(set(tuned())) and tuned()[0] > 0.05, "each tightening raised the threshold"
            knob = pipe.app.guard.knobs["cache.l2"]
            if not switched():  # the cache stage honours the tune: the guard reads its floor back
                assert await follow.until(lambda: abs(knob.current() - tuned()[-1]) < 1e-9, 5), knob.current()
            first = [follow.verdicts[i] for i in (orjson.loads(p)["request_id"] for p in loose) if i in follow.verdicts]
            l2 = [v for v in first if "cache.l2" in v.mechanisms]
            assert len(l2) >= 20 and agreement(l2) < 0.5, "a loose L2 should answer other questions' decisions"
            alerts = [a for a in follow.alerts if a.rule == "shadow_agreement" and a.scope == "cache.l2"]
            assert alerts and all("revert: jev switch" in a.message for a in alerts), "an alert names the revert"
            await asyncio.sleep(1.5)  # every process reads the control topic within ~200 ms

            later = requests("later", LATER, seed=2)
            await waves(pipe, follow, later)
            ids = {orjson.loads(p)["request_id"] for p in later}
            assert await follow.until(lambda: ids <= follow.verdicts.keys()), "verdicts of the second phase missing"
            second = [follow.verdicts[i] for i in ids]
            if switched():
                assert not any(follow.decisions[i].tier == "cache_l2" for i in ids), "L2 still served after the switch"
            assert agreement(second) >= 0.9 > agreement(first), (agreement(first), agreement(second))

            def stored() -> int:
                return int(pipe.ch.query("SELECT count() FROM shadow_verdicts FINAL").result_rows[0][0])

            assert await follow.until(lambda: stored() == len(follow.verdicts), 60), (stored(), len(follow.verdicts))
            every = list(follow.verdicts.values())  # phase 1's verdicts that came after `first` was taken included
            n, agreed = pipe.ch.query(
                "SELECT sum(verdicts), sum(agreed) FROM agreement_by_mechanism_day WHERE mechanism = 'all'"
            ).result_rows[0]
            assert (n, agreed) == (len(every), sum(v.agreed for v in every))
            print(
                f"\nL2 verdicts {len(l2)}, agreement {agreement(l2):.3f}; phase 1 {agreement(first):.3f} "
                f"({len(first)}), phase 2 {agreement(second):.3f} ({len(second)}); controls "
                f"{[(c.kind, c.key, c.value) for c in follow.controls]}"
            )  # the figures, with -s
        finally:
            follow.stopping.set()
            await following
