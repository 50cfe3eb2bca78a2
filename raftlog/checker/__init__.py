"""A Jepsen-style history recorder and checker for a partitioned log.

Record a run with :class:`History`, read every partition back once the
faults have healed, and :func:`check` it: the :class:`Report` says whether any
acknowledged value was lost, duplicated, moved or overwritten, whether any
failed write became visible, and whether producers' order held.
:class:`BatchHistory` and :func:`check_batches` check exactly-once *batches*
(versions committed by the transaction coordinator): fractured, lost or
duplicated batches, and uncommitted ones made visible.
"""

from raftlog.checker.batches import (
    BATCH_KINDS,
    BatchHistory,
    BatchReport,
    check_batches,
    row_value,
)
from raftlog.checker.check import check
from raftlog.checker.history import (
    History,
    OffsetValue,
    Operation,
    OpKind,
    Outcome,
    TopicPartition,
    load_history,
)
from raftlog.checker.report import FATAL_KINDS, Anomaly, Report

__all__ = [
    "BATCH_KINDS",
    "FATAL_KINDS",
    "Anomaly",
    "BatchHistory",
    "BatchReport",
    "History",
    "OffsetValue",
    "OpKind",
    "Operation",
    "Outcome",
    "Report",
    "TopicPartition",
    "check",
    "check_batches",
    "load_history",
    "row_value",
]
