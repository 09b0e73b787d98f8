"""The cache stage's state and decisions: L1 exact (a Faust table), L2 semantic (in memory), L3 predictive
(pre-answers of the follow-ups sessions usually ask next, kept in L2 marked predictive), versions.

A version bump marks entries stale: a stale entry is served once while one refresh of it is queued. L2 serves a hit
only where the learned threshold allows it, and the verdicts come back through `learn` and `fill`. Every L2 fill,
verdict, promotion and L3 observation is queued in `changes` for the cache-state topic, from which a restarted or
new stage process rebuilds the same state (`restore`).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping

from schemas.records import Decision, Request, Work
from streams.cache import changelog
from streams.cache.calibration import ThresholdStore
from streams.cache.embedders import load_embedder
from streams.cache.entry import Entry, Hit, RefreshQueue, VersionBook, serve
from streams.cache.evidence import DECIDE, DECIDE_POOL, PooledEvidence
from streams.cache.exact import BoundedLRU, cache_key
from streams.cache.learning import ThresholdLearner
from streams.cache.modelcheck import check_name, decision_name, load_model_check
from streams.cache.predictive import TenantFollowups, plan
from streams.cache.semantic import (
    QUESTION_FIELDS,
    Candidate,
    SemanticCache,
    answers_agree,
    asks_in_words,
    entry_key,
    partition_of,
    question_of,
)
from streams.cache.verifier import load_verifier
from streams.text import tokens
from streams.text.prompt import render_context

PENDING_VECTORS = 10_000
PENDING_CHANGES = 100_000  # cache-state records awaiting the agent (oldest dropped past it: memory stays bounded)
PREFETCH_MIN_SEEN = 2  # a follow-up seen once is noise (one session's path), not a pattern worth tokens
PENDING_JUDGEMENTS = 10_000  # near-misses whose naive twin is out (one per question and partition at a time)
JUDGE_AGAIN_AGES = 2  # a twin not back after this many shadow max ages was dropped: the question may be judged again
JUDGE_SUFFIX = "~promote"  # a judging twin's request id: its shadow usage is its own, apart from a sampled twin's


class CacheStage:
    def __init__(self, table, settings):
        """L2 uses settings.cache_embedder (`none` turns L2 off), its calibrated threshold as the floor of
        candidates, the learned verifier with one threshold certified from all partitions' verdicts to
        settings.cache_max_error (evidence.py; 0: the calibrated threshold serves), and the model check
        settings.cache_model_check names, if any (a verifier feature)."""
        self.table = table
        self.versions = VersionBook()
        self.refresh = RefreshQueue()
        self.max_l1 = settings.cache_max_entries
        self.semantic = None
        self.changes: deque[dict] = deque(maxlen=PENDING_CHANGES)  # changelog records not yet sent
        self.record_changes = bool(settings.cache_state_topic)
        self.learner = (
            ThresholdLearner(
                settings.cache_max_error, settings.cache_error_confidence, explore=settings.cache_explore_rate
            )
            if settings.cache_max_error > 0
            else None
        )
        if settings.cache_embedder != "none":
            embedder = load_embedder(settings.cache_embedder)
            check = check_name(settings.cache_model_check, embedder.name)
            decision, store = decision_name(embedder.name, check), ThresholdStore(settings.data_dir)
            evidence = decide = None
            if self.learner is not None:
                evidence = PooledEvidence(load_verifier(decision, settings.data_dir), self.learner)
                decide = PooledEvidence(
                    load_verifier(decision + DECIDE, settings.data_dir),
                    self.learner,
                    pool=DECIDE_POOL,
                    prior_bounds=True,
                    by_language=True,
                )
            self.semantic = SemanticCache(
                embedder,
                store.threshold(decision, settings.cache_semantic_threshold),
                max_exact=settings.cache_exact_index_max,
                book=self.versions,
                refresh=self.refresh,
                max_entries=settings.cache_semantic_max_entries,
                check=load_model_check(check, store.check_threshold(decision)),
                learner=self.learner,
                evidence=evidence,
                promote_margin=settings.cache_promote_margin if evidence else 0.0,
                decide_evidence=decide,
            )
        self.vectors = BoundedLRU(PENDING_VECTORS)  # cache key -> L2 vector of a miss, reused at fill
        self.embedded = BoundedLRU(PENDING_VECTORS)  # question -> vector, recent questions
        self.followups = TenantFollowups()
        self.reserve = lambda work, tokens: True  # set by the app: holds a pre-answer's budget or refuses it
        self.prefetching = BoundedLRU(PENDING_VECTORS)  # entry keys of pre-answers being scored
        self.prefetch_tokens = settings.cache_prefetch_tokens
        self.judging: list[Work] = []  # naive twins of near-misses, not sent yet
        self.judged = BoundedLRU(PENDING_JUDGEMENTS)  # entry key of a near-miss being judged -> when its twin left
        self.judge_again_s = JUDGE_AGAIN_AGES * settings.shadow_max_age_ms / 1000

    def on_control(self, control) -> None:
        if control.kind == "version":
            self.versions.bump(control.key, str(control.value))
        elif control.kind == "tune" and control.key == "cache.l2.min_similarity" and self.semantic is not None:
            try:
                floor = float(control.value)
            except (TypeError, ValueError):
                raise ValueError(f"tune cache.l2.min_similarity takes a number, got {control.value!r}") from None
            self.semantic.min_similarity = floor  # the learner's floor, or the fixed threshold (max error 0)

    def learn(self, work: Work, agreed: bool) -> None:
        """A shadow verdict on a request an L2 hit answered: did the served answer agree with the naive one?
        Recorded against the partition and entry the hit matched (work.cache_match); a work no L2 hit answered
        is ignored."""
        match = work.cache_match
        if self.semantic is not None and match and match.get("served"):
            self._learn(Candidate.from_dict(match), agreed)

    def _learn(self, candidate: Candidate, agreed: bool) -> None:
        self.semantic.learn(candidate, agreed)
        if self.record_changes:
            self.changes.append(changelog.verdict(candidate, agreed))

    def restore(self, records: list[dict]) -> None:
        """Apply cache-state records (changelog.py) in order: what another process filled and learned."""
        changelog.apply(self, records)

    def take_changes(self) -> list[dict]:
        changes = list(self.changes)
        self.changes.clear()
        return changes

    def embed(self, works: list[Work]) -> list:
        """L2 vectors of the works' questions, each distinct question embedded once (and remembered)."""
        questions = [question_of(w.request) for w in works]
        missing = list(dict.fromkeys(q for q in questions if q not in self.embedded))
        vectors = dict(zip(missing, self.semantic.embedder.embed(missing))) if missing else {}
        for question in questions:
            if question not in vectors:
                vectors[question] = self.embedded.get(question)
            self.embedded[question] = vectors[question]
        return [vectors[q] for q in questions]

    def wants_semantic(self, work: Work, switches) -> bool:
        return self.semantic is not None and switches["cache.l2"] and asks_in_words(work.request)

    def lookup_exact(self, work: Work, switches) -> Hit | None:
        if not switches["cache.l1"]:
            return None
        raw = self.table.get(work.cache_key)
        hit = serve(work.cache_key, Entry.loads(raw) if raw else None, self.versions, self.refresh, work)
        if hit is not None and hit.stale:
            self.table[work.cache_key] = hit.entry.dumps()  # remember it was served stale once
        return hit

    def lookup_semantic(self, work: Work, vector) -> Hit | None:
        hit, candidate = self.semantic.probe(partition_of(work.request), question_of(work.request), vector)
        if candidate is not None:
            work.cache_match = candidate.to_dict()
        if hit is None:
            self.vectors[work.cache_key] = vector
            if candidate is not None and candidate.near_miss:
                self._judge_later(work)
        return hit

    def _judge_later(self, work: Work) -> None:
        """Queue the naive twin of a near-miss (once per question and partition while one is out; never for a
        refill, a pre-answer or a request a budget degraded: shadow work yields)."""
        if work.refresh or work.predictive or work.tier_cap:
            return
        key, now = entry_key(partition_of(work.request), question_of(work.request)), time.time()
        if now - self.judged.get(key, -math.inf) > self.judge_again_s:
            self.judged[key] = now
            self.judging.append(judge_twin(work))

    def judge_twins(self) -> list[Work]:
        """The naive twins of near-misses queued since the last call (for the shadow topic)."""
        twins, self.judging = self.judging, []
        return twins

    def promote(self, twin: Work, agrees: Callable[[Mapping], bool]) -> str:
        """A near-miss's naive twin, decided: `agrees(cached)` judges the candidate's cached answer against the
        naive one (the shadow comparison). Returns promoted, different, or gone (the cached answer was evicted
        by then)."""
        partition, question = partition_of(twin.request), question_of(twin.request)
        self.judged.pop(entry_key(partition, question), None)
        candidate = Candidate.from_dict(twin.cache_match)
        cached = self.semantic.value_of(candidate.partition, candidate.question) if self.semantic is not None else None
        if cached is None:
            return "gone"
        if not agrees(cached):
            return "different"
        vector = self.embedded.get(question)
        entry = self.semantic.promote(partition, question, candidate.question, vector)
        if entry is None:
            return "gone"
        if self.record_changes:
            self.changes.append(changelog.filled(partition, question, entry, vector))
        return "promoted"

    def answer(self, work: Work, hit: Hit) -> Work:
        """The cached decision as this request's, costing nothing (built by the compiled decoder, not Faust's
        __init__, which took most of a hit's time here)."""
        cached, tier = hit.value, f"cache_{hit.level}"
        work.decision = Decision.from_data(
            {
                "request_id": work.request.request_id,
                "tier": tier,
                "action_id": cached.get("action_id"),
                "text": cached.get("text"),
                "ranking": cached.get("ranking"),
                "confidence": cached.get("confidence"),
                "chain": [f"{tier}{':stale' if hit.stale else ''}", *cached.get("chain", ())],
                "nominal_tokens": cached.get("nominal_tokens"),
            }
        )
        return work

    def refreshes(self, n: int = 100) -> list[Work]:
        """Works whose stale entries must be re-scored, marked so they refill the caches only."""
        works = []
        for _, stale in self.refresh.take(n):
            if isinstance(stale, Work):
                work = Work.from_data(stale.to_representation())
                work.decision, work.refresh = None, True
                works.append(work)
        return works

    def prefetches(self, work: Work, switches) -> list[Work]:
        """Learn this session's question sequence; pre-answer the likely follow-ups not cached yet, within the
        prefetch token budget. The returned works are scored like misses and fill L2 marked predictive."""
        req = work.request
        if self.semantic is None or not switches["cache.l3"] or not req.session_id or not asks_in_words(req):
            return []
        question = question_of(req)
        followups = self.followups.of(req.tenant)
        followups.observe(req.session_id, question)
        if self.record_changes:
            self.changes.append(changelog.observed(req.tenant, req.session_id, question))
        partition = partition_of(req)
        chosen = plan(
            followups,
            question,
            self.prefetch_tokens,
            cost=lambda q: tokens.count(q, work.model) + sum(work.candidate_tokens),
            cached=lambda q: self.semantic.holds(partition, q) or entry_key(partition, q) in self.prefetching,
            min_count=PREFETCH_MIN_SEEN,
        )
        predicted = [(option, predicted_work(work, option.question, n)) for n, option in enumerate(chosen)]
        predicted = [(option, w) for option, w in predicted if self.reserve(w, option.tokens)]  # before model work
        for option, _ in predicted:
            self.prefetching[entry_key(partition, option.question)] = None
        return [w for _, w in predicted]

    def fill(self, work: Work, decision: Decision, switches) -> None:
        value = decision.to_representation()
        entry = Entry(value, dict(self.versions.current), tokens=decision.input_tokens + decision.output_tokens)
        if work.predictive:
            self.prefetching.pop(entry_key(partition_of(work.request), question_of(work.request)), None)
            if self.semantic is not None:
                self._insert(partition_of(work.request), question_of(work.request), value, entry.tokens, True, None)
            return
        if switches["cache.l1"]:
            self.table[work.cache_key] = entry.dumps()
            while len(self.table) > self.max_l1:
                del self.table[next(iter(self.table.keys()))]
        self.refresh.done(work.cache_key)
        vector = self.vectors.pop(work.cache_key, None)
        match = work.cache_match
        if self.semantic is not None and match and not match.get("served"):
            candidate = Candidate.from_dict(match)
            cached = self.semantic.value_of(candidate.partition, candidate.question)
            if cached is not None:  # the neighbour this miss was refused: would its answer have done?
                self._learn(candidate, answers_agree(cached, value))
        if self.semantic is not None and switches["cache.l2"] and vector is not None:
            self._insert(partition_of(work.request), question_of(work.request), value, entry.tokens, False, vector)

    def _insert(self, partition: tuple, question: str, value, tokens_: int, predictive: bool, vector) -> None:
        entry = self.semantic.insert(partition, question, value, tokens=tokens_, predictive=predictive, vector=vector)
        if self.record_changes:
            self.changes.append(changelog.filled(partition, question, entry, vector))


def judge_twin(work: Work) -> Work:
    """A near-miss asked the naive way (the naive engine: top tier, every candidate, no rules, no cache) over
    the context the miss carries (after distill the request's history is gone), with its candidate in
    `cache_match`, keyed like the miss so its decision returns to this cache partition's process."""
    request = work.request.derive(request_id=f"{work.request.request_id}{JUDGE_SUFFIX}", stream=False)
    twin = Work(
        request=request,
        admitted_at=work.admitted_at,
        model=work.model,
        context=work.context,
        context_tokens=work.context_tokens,
        candidate_tokens=list(work.candidate_tokens),
        cache_match=dict(work.cache_match),
        shadow="promote",
    )
    twin.cache_key = work.cache_key
    return twin


def predicted_work(work: Work, question: str, n: int) -> Work:
    """The follow-up `question` asked over the same candidates, as a predictive work with its own request id."""
    state = work.request.state
    state = (
        {**state, next(f for f in QUESTION_FIELDS if isinstance(state.get(f), str)): question}
        if isinstance(state, dict)
        else question
    )
    request = Request.from_data(
        {
            **work.request.to_representation(),
            "state": state,
            "history": [],
            "request_id": f"{work.request.request_id}~l3~{n}",
        }
    )
    context = render_context(request)
    predicted = Work(
        request=request,
        admitted_at=work.admitted_at,
        model=work.model,
        context=context,
        context_tokens=tokens.count(context, work.model),
        candidate_tokens=work.candidate_tokens,
        refresh=True,
        predictive=True,
    )
    predicted.cache_key = cache_key(predicted)
    return predicted
