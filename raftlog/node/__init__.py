"""One node process hosting many Raft groups (see :mod:`raftlog.node.process`)."""

from raftlog.node.config import NodeConfig, add_server_arguments, config_from_args, parse_peers
from raftlog.node.process import Node, run_server, serve

__all__ = [
    "Node",
    "NodeConfig",
    "add_server_arguments",
    "config_from_args",
    "parse_peers",
    "run_server",
    "serve",
]
