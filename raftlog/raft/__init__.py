"""Raft consensus for one group, in the style of Redpanda (see ``consensus.py`` for the API).

The names below are loaded on first use (PEP 562), so that importing one module
of this package (the pure core, its messages) does not import the async group
and its stages: ``raftlog.raft.core`` can be imported alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Configuration": "raftlog.raft.configuration",
    "ConfigurationChangeError": "raftlog.raft.errors",
    "Consensus": "raftlog.raft.consensus",
    "ConsensusOptions": "raftlog.raft.options",
    "Consistency": "raftlog.raft.replicate_batcher",
    "HeartbeatManager": "raftlog.raft.heartbeat_manager",
    "LeadershipLostError": "raftlog.raft.errors",
    "NotLeaderError": "raftlog.raft.errors",
    "PeerDispatcher": "raftlog.raft.dispatch",
    "RaftError": "raftlog.raft.errors",
    "ReplicateResult": "raftlog.raft.replicate_batcher",
    "ReplicateStages": "raftlog.raft.replicate_batcher",
    "StateMachine": "raftlog.raft.state_machines",
    "TermMismatchError": "raftlog.raft.errors",
    "Transport": "raftlog.raft.transport",
    "TransportError": "raftlog.raft.errors",
}

__all__ = [
    "Configuration",
    "ConfigurationChangeError",
    "Consensus",
    "ConsensusOptions",
    "Consistency",
    "HeartbeatManager",
    "LeadershipLostError",
    "NotLeaderError",
    "PeerDispatcher",
    "RaftError",
    "ReplicateResult",
    "ReplicateStages",
    "StateMachine",
    "TermMismatchError",
    "Transport",
    "TransportError",
]

if TYPE_CHECKING:
    from raftlog.raft.configuration import Configuration
    from raftlog.raft.consensus import Consensus
    from raftlog.raft.dispatch import PeerDispatcher
    from raftlog.raft.errors import (
        ConfigurationChangeError,
        LeadershipLostError,
        NotLeaderError,
        RaftError,
        TermMismatchError,
        TransportError,
    )
    from raftlog.raft.heartbeat_manager import HeartbeatManager
    from raftlog.raft.options import ConsensusOptions
    from raftlog.raft.replicate_batcher import Consistency, ReplicateResult, ReplicateStages
    from raftlog.raft.state_machines import StateMachine
    from raftlog.raft.transport import Transport


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'raftlog.raft' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
