"""``Node`` is composed of parts passed in (issue 45): every client route is answered
by one part's method of the route's name, the parts share the node's one context, and
a call of any other type is refused by name."""

from __future__ import annotations

import argparse
import asyncio
import pathlib

import pytest

from raftlog.node.config import add_server_arguments, config_from_args
from raftlog.node.process import Node
from raftlog.rpc.messages import CLIENT_ROUTES, ErrorCode
from raftlog.rpc.peer import ShardStateRequest
from raftlog.rpc.server import RequestError

# the one route whose handler has another name: the coordinator's EndTxn
_HANDLER_NAMES = {"coordinator": "txn_end"}


def _node(tmp_path: pathlib.Path) -> Node:
    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    args = ["--node-id", "1", "--listen", "127.0.0.1:1", "--data-dir", str(tmp_path)]
    return Node(config_from_args(parser.parse_args(args)))


def test_every_client_route_is_answered_by_one_part(tmp_path: pathlib.Path) -> None:
    node = _node(tmp_path)
    parts = [node.metadata, node.data, node.admin]
    for message_type, route in CLIENT_ROUTES.items():
        handler = node.handler_for(message_type)
        assert handler is not None, f"{route}: no handler"
        assert handler.__name__ == _HANDLER_NAMES.get(route, route), route
        assert any(handler.__self__ is part for part in parts), route  # type: ignore[attr-defined]
    assert node.handler_for(ShardStateRequest) is None


def test_the_parts_and_the_node_share_one_state(tmp_path: pathlib.Path) -> None:
    node = _node(tmp_path)
    ctx = node.ctx
    assert ctx.partitions is node.partitions and ctx.controller_stm is node.controller_stm
    assert (ctx.config, ctx.host, ctx.metrics) == (node.config, node.host, node.metrics)
    assert node.controller is None and node.controller_leader() == -1  # before start
    assert node.owns(0) and node.upkeep.open_failures == {}  # the controller: shard 0


def test_a_call_of_another_type_is_refused_by_name(tmp_path: pathlib.Path) -> None:
    node = _node(tmp_path)
    with pytest.raises(RequestError) as info:
        asyncio.run(node.handle_client(ShardStateRequest(1, b"")))
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert "unsupported ShardStateRequest" in str(info.value)
