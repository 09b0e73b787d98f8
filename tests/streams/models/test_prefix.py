"""Jev's claim of what a server's prefix cache serves: the full blocks an earlier prompt to it began with (one still in
flight included), never the prompt's last token, the least recently sent blocks forgotten as the server evicts them,
and a failed call's blocks forgotten."""

import pytest

from streams.models.prefix import PrefixCache


def sent(cache: PrefixCache, ids: list[int]) -> int:
    return cache.claim(ids)[0]


def test_the_shared_full_blocks_are_claimed():
    cache = PrefixCache(block=4, capacity=100)
    state = list(range(10))  # two full blocks and two tokens of a third
    assert sent(cache, state + [50, 51, 52]) == 0
    assert sent(cache, state + [60, 61, 62]) == 8  # blocks 0-1 shared; block 2 differs at its third token
    assert sent(cache, [99] + state) == 0  # what changes first: no block of it was sent before


def test_a_repeated_prompt_leaves_its_last_token_to_the_server():
    cache = PrefixCache(block=4, capacity=100)
    prompt = list(range(12))
    assert sent(cache, prompt) == 0
    assert sent(cache, prompt) == 8  # the last token is computed, so the third block is not served
    assert sent(cache, prompt + [12]) == 12


def test_blocks_past_the_capacity_are_no_longer_claimed():
    cache = PrefixCache(block=2, capacity=3)
    assert sent(cache, [1, 2, 3, 4, 5]) == 0
    assert sent(cache, [7, 8, 9, 10, 11, 12, 13]) == 0  # three more blocks push the first prompt's two out
    assert sent(cache, [1, 2, 3, 4, 5]) == 0
    assert sent(cache, [1, 2, 3, 4, 6]) == 4


def test_a_failed_call_forgets_only_the_blocks_it_added():
    cache = PrefixCache(block=4, capacity=100)
    state = list(range(8))
    assert sent(cache, state + [50]) == 0
    cached, added = cache.claim(state + [60, 61, 62, 63, 64])
    assert cached == 8 and len(added) == 1  # the state's two blocks were there; the call added its third
    cache.forget(added)
    assert sent(cache, state + [60, 61, 62, 63, 64]) == 8  # the third block never reached the server
    assert sent(cache, state + [70]) == 8  # the state's blocks, an earlier call's, are still claimed


def test_a_block_size_or_capacity_below_one_names_the_options():
    with pytest.raises(ValueError, match="cache_block_tokens.*cache_blocks"):
        PrefixCache(block=0, capacity=10)
