"""The transaction coordinator: ``tm_stm`` on the internal ``__transactions`` topic.

:mod:`raftlog.coordinator.state` is the pure state machine,
:mod:`raftlog.coordinator.tm_stm` runs it on a Raft group, and
:mod:`raftlog.coordinator.txn_coordinator` runs each transaction on the group's
leader (decide, write every marker, record completion, resume after a failover).
"""
