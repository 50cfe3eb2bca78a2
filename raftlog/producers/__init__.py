"""rm_stm: idempotent producers and single-partition transactions.

The rules are docs/ARCHITECTURE.md's ("Producers: idempotence and single-partition
transactions").

Modules: ``producer_table`` (the pure, replicated state), ``rm_stm`` (the
pipelined leader front over Consensus), ``sequencer`` (the client's side),
``fetch_filter`` (what readers may see), ``outcomes`` (results and errors).
"""

from raftlog.producers.outcomes import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerError,
    ProduceResult,
    ProducerFencedError,
    UnknownOutcomeError,
)
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
    "DuplicateSequenceError",
    "EndTxnResult",
    "InitProducerResult",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProduceResult",
    "ProducerError",
    "ProducerFencedError",
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
