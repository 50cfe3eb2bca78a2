"""The node process's C heap: freed memory handed back to the system after a burst.

Why. A ``/metrics`` scrape at 10,000 partitions reads about 157,000 samples and builds
12.5 MB of text, in a worker thread (``NodeMetrics.render_async``): tens of MB
allocated and freed within a second. glibc's allocator keeps freed memory in its heap
for reuse and returns to the system only what lies at the heap's top, so a heap left
fragmented by the burst stays in the process's resident memory. The full benchmark
run of 2026-12-04 19:06 UTC, the first with scrapes built in a thread, measured 685
MiB per node at 10,000 partitions against 542 MiB the run before (docs/performance.md).

What. :func:`release_freed_memory` asks glibc to return every whole free page of
every arena (``malloc_trim(0)``); the node calls it after each scrape, on the thread
that builds the scrapes' text (``raftlog.metrics.in_render_thread``, whose arena holds
little else).
It frees nothing in use, so it cannot change what the node holds; it costs a walk of
the free lists (about 0.2 ms for a 70 MiB heap). Elsewhere (musl, macOS) there is no
such call, and nothing is done.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

__all__ = ["release_freed_memory"]


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: no such call
        return None
    return trim


_MALLOC_TRIM = _find_malloc_trim()


def release_freed_memory() -> bool:
    """Return the C heap's free pages to the system; whether the platform can (glibc).

    Safe from any thread at any time (the allocator locks each arena it trims); ctypes
    releases the GIL for the call, so run it in a thread to keep the loop turning.
    """
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
