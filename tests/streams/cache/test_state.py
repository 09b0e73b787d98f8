from streams import tokens
from streams.cache.state import StateEncodingCache, state_hash


def test_state_hash_ignores_key_order():
    assert state_hash({"a": 1, "b": [1, 2]}) == state_hash({"b": [1, 2], "a": 1})
    assert state_hash({"a": 1}) != state_hash({"a": 2})


def test_repeated_state_is_a_cache_read():
    calls = []

    def encode(texts):
        calls.append(list(texts))
        return [t.upper() for t in texts]

    cache = StateEncodingCache(encode, lambda t: tokens.count(t, "gpt-4o-mini"))
    state = {"sku": "A1", "stock": 3}
    first, again_in_batch, other = cache.get_many([state, {"stock": 3, "sku": "A1"}, "plain text state"])
    assert first.cache_read_tokens == 0 and first.input_tokens > 0
    assert again_in_batch.cache_read_tokens == again_in_batch.input_tokens == first.input_tokens
    assert other.value == "PLAIN TEXT STATE"
    later = cache.get(state)
    assert later.cache_read_tokens == later.input_tokens and later.value == first.value
    assert len(calls) == 1 and len(calls[0]) == 2


def test_batch_larger_than_the_cache_still_returns_every_state():
    cache = StateEncodingCache(lambda texts: list(texts), len, max_entries=1)
    assert [e.value for e in cache.get_many(["a", "b", "c"])] == ["a", "b", "c"]
