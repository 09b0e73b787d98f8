"""What a model server's prefix cache should serve of a prompt: Jev's claim, beside the server's cached_tokens.

vLLM's automatic prefix caching reuses whole KV blocks, each keyed by the chain of block hashes from the prompt's
start, and always computes a prompt's last token itself. So of a prompt the cache should serve the full blocks an
earlier prompt sent to the same server began with: the session's state and history read again by its next decision
(state_cache), a decision's context shared by the calls of its candidates (shared_context). Jev claims that count
in its own tokenizer, as a call's cache_read_tokens; the server's prompt_tokens_details.cached_tokens confirms it or
not (the cached drift: blocks the server evicted, prompts another process sent, a prompt that puts what changes
first).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """The blocks of prompts sent to one server, the `capacity` most recently sent kept (the server evicts too)."""

    def __init__(self, block: int, capacity: int):
        if block < 1 or capacity < 1:
            raise ValueError(
                f"prefix cache: options.cache_block_tokens ({block}) and options.cache_blocks ({capacity}) must be "
                ">= 1: the server's block size (vLLM's --block-size) and how many blocks its KV cache holds"
            )
        self.block, self.capacity = block, capacity
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.lock = threading.Lock()

    def claim(self, ids: Sequence[int]) -> tuple[int, list[int]]:
        """The tokens of the prompt `ids`, about to be sent, that the server's cache should serve; its blocks are
        remembered from now on (a prompt still in flight serves the next: the server queues it behind this one's
        prefill). Returns the keys it added, for forget() if the call fails."""
        keys, key = [], 0
        for start in range(0, len(ids) - self.block + 1, self.block):
            key = hash((key, tuple(ids[start : start + self.block])))
            keys.append(key)
        with self.lock:
            hits = next((i for i, k in enumerate(keys) if k not in self.blocks), len(keys))
            added = [k for k in keys if k not in self.blocks]
            for k in keys:
                self.blocks[k] = None
                self.blocks.move_to_end(k)
            while len(self.blocks) > self.capacity:
                self.blocks.popitem(last=False)
        return (min(hits * self.block, (len(ids) - 1) // self.block * self.block) if ids else 0), added

    def forget(self, keys: list[int]) -> None:
        """A call the server refused or never got: the blocks it added are not in its cache. (A call cut by its
        deadline keeps them: the server most likely computed its prompt before the client gave up.)"""
        with self.lock:
            for k in keys:
                self.blocks.pop(k, None)
