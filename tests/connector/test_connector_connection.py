"""Where the connector finds its cluster: option, environment, auth token (no Spark, no cluster)."""

from __future__ import annotations

import asyncio
import pickle

import pytest
from aiohttp import web
from pyspark_raftlog.connection import (
    ClusterServers,
    open_async_client,
    open_blocking_client,
    resolve_servers,
)
from pyspark_raftlog.options import OptionError, parse_sink_options, parse_source_options

from raftlog.cluster import free_ports
from raftlog.rpc import codec
from raftlog.rpc.messages import ListTopicsResponse, MetadataResponse, NodeInfo


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAFTLOG_SERVERS", raising=False)
    monkeypatch.delenv("RAFTLOG_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAFTLOG_CLIENT_TOKEN", raising=False)


def test_the_client_token_variable_wins_over_its_older_name(monkeypatch) -> None:
    monkeypatch.setenv("RAFTLOG_AUTH_TOKEN", "older-name")
    monkeypatch.setenv("RAFTLOG_CLIENT_TOKEN", "client-token")
    assert parse_sink_options({"topic": "t"}, streaming=True).auth_token == "client-token"
    monkeypatch.delenv("RAFTLOG_AUTH_TOKEN")
    assert parse_source_options({"topic": "t"}, streaming=True).auth_token == "client-token"


def test_servers_and_token_come_from_the_environment_when_no_option(monkeypatch) -> None:
    monkeypatch.setenv("RAFTLOG_SERVERS", "a:1, b:2")
    monkeypatch.setenv("RAFTLOG_AUTH_TOKEN", "s3cret")
    sink = parse_sink_options({"topic": "t"}, streaming=True)
    source = parse_source_options({"topic": "t"}, streaming=True)
    for opts in (sink, source):
        assert opts.servers == ("a:1", "b:2")
        assert opts.auth_token == "s3cret"


def test_options_win_over_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("RAFTLOG_SERVERS", "a:1")
    monkeypatch.setenv("RAFTLOG_AUTH_TOKEN", "from-env")
    opts = parse_sink_options(
        {"topic": "t", "servers": "c:3", "AUTHTOKEN": "from-option"}, streaming=False
    )
    assert (opts.servers, opts.auth_token) == (("c:3",), "from-option")


def test_without_option_or_environment_the_embedded_cluster_is_meant() -> None:
    opts = parse_source_options({"topic": "t"}, streaming=False)
    assert (opts.servers, opts.auth_token) == (None, None)


def test_a_bad_environment_value_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("RAFTLOG_SERVERS", "a:1,nohost")
    with pytest.raises(OptionError, match=r"RAFTLOG_SERVERS .*host:port.*'nohost'"):
        parse_sink_options({"topic": "t"}, streaming=True)
    monkeypatch.setenv("RAFTLOG_SERVERS", "a:1")
    monkeypatch.setenv("RAFTLOG_AUTH_TOKEN", "has space")
    with pytest.raises(OptionError, match="RAFTLOG_AUTH_TOKEN") as info:
        parse_sink_options({"topic": "t"}, streaming=True)
    assert "has space" not in str(info.value)  # a secret is never echoed


@pytest.mark.parametrize("value", ["", "  ", "tab\there", "x" * 5000, "caf\u00e9"])
def test_a_bad_auth_token_option_is_named_and_not_echoed(value: str) -> None:
    with pytest.raises(OptionError, match="option 'authToken'") as info:
        parse_source_options({"topic": "t", "authToken": value}, streaming=True)
    if value.strip():
        assert value not in str(info.value)


def test_the_token_is_not_in_the_options_repr() -> None:
    opts = parse_sink_options({"topic": "t", "authToken": "s3cret"}, streaming=True)
    assert "s3cret" not in repr(opts)


def test_resolved_servers_carry_the_token_through_pickling() -> None:
    servers = resolve_servers(("a:1", "b:2"), "s3cret")
    assert servers == ["a:1", "b:2"] and servers.auth_token == "s3cret"
    assert "s3cret" not in repr(servers)
    again = pickle.loads(pickle.dumps(servers))
    assert isinstance(again, ClusterServers) and again.auth_token == "s3cret"


async def test_clients_send_the_carried_token() -> None:
    """What a node receives: the token carried by the servers, unless one is passed."""
    seen: list[str | None] = []

    (port,) = free_ports(1)

    async def list_topics(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(body=codec.encode(ListTopicsResponse(["t"])))

    async def metadata(request: web.Request) -> web.Response:
        """Where the client learns the controller's leader (this node) first."""
        assert request.headers.get("Authorization") in ("Bearer s3cret", "Bearer other")
        meta = MetadataResponse(1, 1, [NodeInfo(1, f"127.0.0.1:{port}")], [])
        return web.Response(body=codec.encode(meta))

    app = web.Application()
    app.router.add_post("/v1/list_topics", list_topics)
    app.router.add_post("/v1/metadata", metadata)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        servers = ClusterServers([f"127.0.0.1:{port}"], "s3cret")
        for token in (None, "other"):
            client = open_async_client(servers, 5.0, auth_token=token)
            try:
                assert await client.list_topics() == ["t"]
            finally:
                await client.close()
        blocking = await asyncio.to_thread(open_blocking_client, servers, 5.0)
        try:
            assert await asyncio.to_thread(blocking.list_topics) == ["t"]
        finally:
            await asyncio.to_thread(blocking.close)
    finally:
        await runner.cleanup()
    assert seen == ["Bearer s3cret", "Bearer other", "Bearer s3cret"]
