"""Raft consensus for one group, in the style of Redpanda (see ``consensus.py`` for the API)."""

from raftlog.raft.configuration import Configuration
from raftlog.raft.consensus import Consensus, ConsensusOptions, StateMachine
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
from raftlog.raft.replicate_batcher import Consistency, ReplicateResult, ReplicateStages
from raftlog.raft.transport import Transport

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
