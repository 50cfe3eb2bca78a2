"""A Jepsen-style history recorder and checker for a partitioned log.

Record a run with :class:`History`, read every partition back once the
faults have healed, and :func:`check` it: the :class:`Report` says whether any
acknowledged value was lost, duplicated, moved or overwritten, whether any
failed write became visible, and whether producers' order held.
"""

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
    "FATAL_KINDS",
    "Anomaly",
    "History",
    "OffsetValue",
    "OpKind",
    "Operation",
    "Outcome",
    "Report",
    "TopicPartition",
    "check",
    "load_history",
]
