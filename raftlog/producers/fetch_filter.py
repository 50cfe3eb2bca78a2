"""What a fetch may return: the server-side read-committed filter.

Kafka's read_committed consumers filter aborted data on the client with the
aborted-transaction list a fetch returns; raftlog filters on the server, so a
client can never see aborted data. A batch is visible when all of:

- it ends below the last stable offset (it is committed, and no open
  transaction starts at or before it);
- it is a data batch (markers, fences, raft configuration and no-op batches
  are control batches that clients never see);
- it is not transactional data inside an aborted range of its producer.

Transactional data below the LSO whose range is not aborted was committed,
since every transaction that began below the LSO has ended.
"""

from __future__ import annotations

from collections.abc import Iterable

from raftlog.producers.aborted_index import AbortedIndex
from raftlog.storage.batch import RecordBatch


def visible_batches(
    batches: Iterable[RecordBatch], last_stable_offset: int, aborted: AbortedIndex
) -> list[RecordBatch]:
    """The batches of ``batches`` a reader may see, in their order (see the module doc)."""
    out = []
    for batch in batches:
        if batch.last_offset >= last_stable_offset:
            break  # batches come in offset order; nothing after this is visible either
        if batch.is_control:
            continue
        if batch.is_transactional and aborted.is_aborted(batch.producer_id, batch.base_offset):
            continue
        out.append(batch)
    return out
