"""Process tuning for the long-running workers: the garbage collector's view of the start-up heap and of the
objects a busy stage allocates. (Model threads are set by the model registry, streams/models/loaded.py.)"""

from __future__ import annotations

import gc

# Allocations between two young collections (CPython's default: 700). A stage process allocates ~50 tracked
# objects per request, so at the default a 2,000-request burst ran ~160 young collections, whose survivors (work
# still in flight) filled the older generations and set off a full collection per burst. At 10,000: 7 young
# collections of ~3 ms each, the collector's time per burst 46-80 -> 27-36 ms, and bursts of L1 hits decided at
# 2,737-3,009 against 2,459-2,848 per second (median 2,937 against 2,659, two alternations of five bursts).
YOUNG_COLLECTION_ALLOCATIONS = 10_000


def freeze_heap() -> None:
    """Move everything alive after start-up (models, tokenizers, Faust's services) out of the collector's reach,
    and collect the young generation every YOUNG_COLLECTION_ALLOCATIONS allocations. A full collection scans
    every tracked object: 30-186 ms each in the stages process while it started, 1.6 ms for the first one after
    the freeze. Call once, when a worker is ready."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, *gc.get_threshold()[1:])
