"""Admission control arithmetic: spreading a per-trigger budget over partitions.

``maxRecordsPerTrigger`` (and ``maxBytesPerTrigger``, once converted to a
budget per partition) caps one micro-batch. The budget is spread over the
partitions that have a backlog, in proportion to their backlog, without
starving the small ones:

1. every partition with a backlog first gets a floor of
   ``min(backlog, max(1, budget // (2 * k)))`` (k = partitions with a backlog),
   so at most half the budget goes to equal floors;
2. the rest is split in proportion to the remaining backlog, by the largest
   remainder method (exact integers, no float rounding drift).

When the budget is smaller than k, not every partition can get a record; one
record each goes to ``budget`` partitions chosen round-robin from ``rotation``
(the caller passes something that advances every batch, e.g. the sum of the
start offsets), so that no partition waits forever.

Contract (checked by property tests): every share is in ``[0, backlog]``; the
shares sum to ``min(budget, total backlog)``; with ``budget >= k`` every
partition with a backlog gets at least one record.

``minOffsetsPerTrigger`` with ``maxTriggerDelay`` (:class:`TriggerDelay`) holds a
micro-batch back instead: Kafka's rule, below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

#: a partition's key: its number, or (topic, number); keys are sorted
K = TypeVar("K", bound="SupportsRichComparison")

__all__ = ["TriggerDelay", "limit_end_offsets", "spread_budget"]


@dataclasses.dataclass
class TriggerDelay:
    """Kafka's ``minOffsetsPerTrigger`` with ``maxTriggerDelay``: whether a trigger runs.

    A trigger that finds fewer than ``min_offsets`` new offsets across all
    partitions is skipped (the source answers its previous end, so Spark runs
    no batch), until ``max_delay_ms`` has passed since the last batch; then it
    runs with what there is. The first batch of a query run is never held back
    (Kafka's ``lastTriggerMillis`` starts at 0). Only a trigger that reads
    something counts as a batch: an empty one does not restart the delay.
    The clock is passed in (``now_ms``), so the rule is testable without waiting.
    """

    min_offsets: int
    max_delay_ms: int
    last_batch_ms: float | None = None  # None: no batch yet in this run

    def admit(self, new_offsets: int, now_ms: float) -> bool:
        """True when a trigger that found ``new_offsets`` new offsets at ``now_ms`` runs."""
        runs = (
            self.last_batch_ms is None
            or new_offsets >= self.min_offsets
            or now_ms - self.last_batch_ms >= self.max_delay_ms
        )
        if runs and new_offsets > 0:
            self.last_batch_ms = now_ms
        return runs


def spread_budget(budget: int, backlog: Mapping[K, int], rotation: int = 0) -> dict[K, int]:
    """Records to admit per partition; see the module docstring for the contract."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if any(b < 0 for b in backlog.values()):
        raise ValueError(f"backlogs must be >= 0, got {dict(backlog)}")
    shares = dict.fromkeys(backlog, 0)
    total = sum(backlog.values())
    if budget >= total:
        return dict(backlog)
    waiting = sorted(p for p, b in backlog.items() if b > 0)
    k = len(waiting)
    if budget < k:
        first = rotation % k
        for p in (waiting[(first + i) % k] for i in range(budget)):
            shares[p] = 1
        return shares
    floor = max(1, budget // (2 * k))
    for p in waiting:
        shares[p] = min(backlog[p], floor)
    remaining = budget - sum(shares.values())
    residual = {p: backlog[p] - shares[p] for p in waiting if backlog[p] > shares[p]}
    rtotal = sum(residual.values())
    # remaining < rtotal here (budget < total), so each quotient is < its residual and
    # the +1 of the largest-remainder step still fits.
    remainders = []
    for p, r in residual.items():
        q, rem = divmod(remaining * r, rtotal)
        shares[p] += q
        remainders.append((-rem, p))
    leftover = budget - sum(shares.values())
    for _, p in sorted(remainders)[:leftover]:
        shares[p] += 1
    return shares


def limit_end_offsets(
    start: Mapping[K, int], latest: Mapping[K, int], max_records: int, rotation: int = 0
) -> dict[K, int]:
    """End offsets that admit at most ``max_records`` records beyond ``start``.

    A partition in ``latest`` but not in ``start`` (new since the last batch)
    starts at offset 0. An end never goes below its start.
    """
    begin = {p: start.get(p, 0) for p in latest}
    backlog = {p: max(0, latest[p] - begin[p]) for p in latest}
    shares = spread_budget(max_records, backlog, rotation)
    return {p: begin[p] + shares[p] for p in latest}
