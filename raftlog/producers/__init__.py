"""rm_stm: idempotent producers and single-partition transactions.

The rules are docs/ARCHITECTURE.md's ("Producers: idempotence and single-partition
transactions").

Modules: ``producer_table`` (the pure, replicated state), ``rm_stm`` (the
pipelined leader front over Consensus), ``sequencer`` (the client's side),
``fetch_filter`` (what readers may see), ``outcomes`` (results, and the wire
errors of :mod:`raftlog.errors` they map to).
"""

from raftlog.producers.outcomes import ProduceResult, UnknownOutcomeError
from raftlog.producers.producer_table import ProducerTable, ProducerTableConfig
from raftlog.producers.rm_stm import (
    EndTxnResult,
    InitProducerResult,
    RmStm,
    RmStmConfig,
    SyncError,
)
from raftlog.producers.sequencer import Send, Sequencer, SequencerError

__all__ = [
    "EndTxnResult",
    "InitProducerResult",
    "ProduceResult",
    "ProducerTable",
    "ProducerTableConfig",
    "RmStm",
    "RmStmConfig",
    "Send",
    "Sequencer",
    "SequencerError",
    "SyncError",
    "UnknownOutcomeError",
]
