"""One node process hosting many Raft groups (see :mod:`raftlog.node.process`).

The process module (the whole server) is imported on first use of ``Node``,
``run_server`` or ``serve``: the CLI imports this package for the server's flags,
and a client command (``raftlog cluster health``) must not pay for importing the
server at every start."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from raftlog.node.config import NodeConfig, add_server_arguments, config_from_args, parse_peers

if TYPE_CHECKING:
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

_FROM_PROCESS = frozenset({"Node", "run_server", "serve"})


def __getattr__(name: str) -> Any:
    if name in _FROM_PROCESS:
        return getattr(importlib.import_module("raftlog.node.process"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
