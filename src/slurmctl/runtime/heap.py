"""The garbage collector's settings for a long-running operator process.

Why: CPython's cyclic collector runs a young-generation pass every 700 container allocations, and decoding one API
object allocates hundreds; every full pass walks every live container, the modules' own included. In the
many-clusters benchmark that was most of what decoding the API server's answers cost (msgspec decodes a worker
StatefulSet in ~20 us, ~100 us with the collector running over a large heap). The operator makes few reference
cycles (refcounting frees the rest at once), so collecting less often costs little memory.
"""

from __future__ import annotations

import gc

# Container allocations between young-generation passes (CPython's default: 700).
YOUNG_THRESHOLD = 50_000


def settle() -> None:
    """Once everything is imported and registered, before the work starts: what exists now (modules, classes,
    registrations) lives as long as the process, so the collector stops walking it (`gc.freeze`); and young passes
    run every `YOUNG_THRESHOLD` allocations."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
