"""The node process's garbage collector: open replicas kept out of full collections.

Why. A node's long-lived state is its open partition replicas, about 200 objects the
collector tracks per replica (740,000 tracked objects per node at 3,000 partitions, about
2 million at 10,000). CPython's full (generation 2) collection walks every tracked
object, and runs whenever the objects that survived the young generations grew by a
quarter of those it walked last time: while 10,000 partitions were created (3 nodes on
2 cores), each node ran 21 full collections, the last ones 0.8 s each, and spent 28 of
its 85 CPU-seconds in the collector. A collection stops the event loop, and with it
the node's elections, heartbeats and answers.

What. An open replica's objects live as long as the replica. So once the node has
opened replicas, it moves every object it has into the collector's permanent generation
(:func:`gc.freeze`), which no collection walks; an object whose reference count drops to
zero is still freed at once. When the node closes replicas (a topic deleted, a replica
moved away), it thaws them (:func:`gc.unfreeze`), collects once in full, so that a closed
replica's reference cycles are freed, and freezes what is left. Young collections run
every YOUNG_THRESHOLD allocations instead of CPython's 700: at 10,000 partitions a young
collection took about 1.3 ms, 6,000 of them in a creation.

Cost, bounded. Cyclic garbage that exists at a freeze (a request's exception and its
traceback, say) is kept until the next close thaws it: freezes come once per reconcile
that opened replicas. A close costs one full collection (about 1 s at 10,000 partitions), as
often as replicas close, not as often as they grow.

The collector is per process: :func:`install` (``raftlog server`` calls it) turns the
policy on for the process; until then :func:`replicas_opened` and
:func:`replicas_closed` do nothing, so a test process hosting nodes in-process keeps
Python's defaults. :func:`stats` feeds the ``raftlog_gc_*`` metrics.
"""

from __future__ import annotations

import gc
import time
from typing import Any

__all__ = ["YOUNG_THRESHOLD", "install", "installed", "replicas_closed", "replicas_opened", "stats"]

#: Allocations (net of deallocations) between young collections (CPython: 700).
YOUNG_THRESHOLD = 10_000

_installed = False
# per generation: collections, and seconds spent in them (gc.callbacks)
_collections = [0, 0, 0]
_seconds = [0.0, 0.0, 0.0]
_started = 0.0


def _timed(phase: str, info: dict[str, Any]) -> None:
    global _started
    if phase == "start":
        _started = time.perf_counter()
        return
    generation = info["generation"]
    _collections[generation] += 1
    _seconds[generation] += time.perf_counter() - _started


def install() -> None:
    """Turn the policy on for this process (idempotent): the young threshold, the timing
    of every collection, and the freezes of :func:`replicas_opened`."""
    global _installed
    if _installed:
        return
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    gc.callbacks.append(_timed)
    _installed = True


def installed() -> bool:
    return _installed


def replicas_opened() -> None:
    """The node opened replicas: freeze every object now tracked (no collection first:
    collecting the young generations at each of 100 topics' opens cost 2 s of a node's
    loop in a 10,000-partition creation)."""
    if not _installed:
        return
    gc.freeze()


def replicas_closed() -> None:
    """The node closed replicas: thaw, collect in full (their cycles go), freeze again."""
    if not _installed:
        return
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def stats() -> dict[str, Any]:
    """``collections`` and ``seconds`` per generation (0, 1, 2) since :func:`install`,
    and ``frozen_objects`` (the permanent generation's size)."""
    return {
        "collections": list(_collections),
        "seconds": list(_seconds),
        "frozen_objects": gc.get_freeze_count(),
    }
