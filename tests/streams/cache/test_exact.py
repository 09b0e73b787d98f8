import pytest

from schemas.records import Candidate, Request, TemplateRef, Turn, Work
from streams.cache.entry import RefreshQueue, VersionBook
from streams.cache.exact import BoundedLRU, ExactCache, cache_key


def work(**changes) -> Work:
    fields = dict(request_id="r1", tenant="acme", service="search", decision_type="rank", state="find shoes",
                  candidates=[Candidate(id="a", text="red shoes"), Candidate(id="b", text="blue shoes")])
    model = changes.pop("model", "gpt-4o-mini")
    fields.update(changes)
    return Work(request=Request(**fields), admitted_at=0.0, model=model)


def test_key_ignores_ids_whitespace_and_candidate_order():
    base = cache_key(work())
    assert cache_key(work(request_id="r2", session_id="s9", user_id="u7")) == base
    assert cache_key(work(state="find   shoes ")) == base
    reordered = [Candidate(id="b", text="blue shoes"), Candidate(id="a", text="red shoes")]
    assert cache_key(work(candidates=reordered)) == base


@pytest.mark.parametrize("changes", [
    {"model": "gpt-4o"}, {"state": "find boots"}, {"tenant": "other"}, {"decision_type": "route"},
    {"kind": "generate"}, {"candidates": [Candidate(id="a", text="red shoes")]},
    {"template": TemplateRef(id="t", version="2")}, {"history": [Turn(role="user", content="hi")]},
])
def test_key_changes_with_what_changes_the_answer(changes):
    assert cache_key(work(**changes)) != cache_key(work())


def test_versions_passed_to_the_key_are_part_of_it():
    assert cache_key(work(), {}) == cache_key(work())
    assert cache_key(work(), {"prompt": "1"}) == cache_key(work(), {"prompt": "1"})
    assert cache_key(work(), {"prompt": "2"}) != cache_key(work(), {"prompt": "1"})


def test_lru_evicts_least_recently_used():
    lru = BoundedLRU(2)
    lru["a"], lru["b"] = 1, 2
    assert lru.get("a") == 1
    lru["c"] = 3
    assert "b" not in lru and "a" in lru and "c" in lru and lru.evictions == 1


def test_version_bump_serves_stale_once_and_queues_one_refresh():
    book, refresh = VersionBook({"prompt": "1"}), RefreshQueue()
    cache = ExactCache(10, book, refresh)
    cache.insert("k", "answer", tokens=50)
    assert not cache.lookup("k").stale
    book.bump("prompt", "2")
    first = cache.lookup("k")
    assert first.stale and first.value == "answer"
    assert cache.lookup("k") is None
    assert refresh.take(10) == [("k", None)]
    assert refresh.put("k") is False  # in flight: no second refresh
    cache.insert("k", "new answer")
    hit = cache.lookup("k")
    assert not hit.stale and hit.value == "new answer" and hit.entry.versions == {"prompt": "2"}


def test_bump_of_an_unrelated_kind_leaves_others_fresh_only_if_recorded():
    book = VersionBook({"model": "a"})
    cache = ExactCache(10, book)
    cache.insert("k", "v")
    book.bump("template:risk", "3")
    assert cache.lookup("k").stale  # entry predates the template version: refreshed, not expired
