"""The transaction coordinator: ``tm_stm`` on the internal ``__transactions`` topic.

:mod:`raftlog.coordinator.state` is the pure state machine,
:mod:`raftlog.coordinator.tm_stm` runs it on a Raft group, and
:mod:`raftlog.coordinator.protocol` is the two-phase commit that writers run
against it (prepare in tasks, decide on the driver, roll forward).
"""
