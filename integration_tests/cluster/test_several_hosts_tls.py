"""Several hosts, TLS and separate secrets (issue 17, item 5).

Three node processes, each on its own loopback address (127.0.0.2, .3, .4),
serve HTTPS with certificates from ``trustme`` and verify each other against
the CA; clients use the client token, nodes the peer token. Checked: a topic
is created, written and read back byte for byte through the TLS client;
metadata advertises the nodes' own addresses; a client without the token, or
with the peer token, is refused with a message naming the token; the client
token is refused on a peer route (and nothing on it gets in without a token);
``/health`` and ``/metrics`` of a node off 127.0.0.1 answer only to a token; a
client that does not trust the CA fails at once, one without TLS is told
about it; bad TLS flags fail the server at start with the flag named and no
traceback; the CLI reaches the cluster with --tls-ca and the token.
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from secure_cluster import (
    ADMIN_TOKEN,
    CLIENT_TOKEN,
    HOSTS,
    PEER_TOKEN,
    SecureCluster,
    make_certificates,
    running_secure_cluster,
)

from raftlog.client import (
    BlockingRaftlogClient,
    RaftlogClient,
    RaftlogError,
    UnauthorizedError,
    frame_records,
    unframe_records,
)
from raftlog.rpc import codec
from raftlog.rpc.messages import ErrorResponse, MetadataRequest, MetadataResponse
from raftlog.rpc.peer import STREAM_PATH

TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    with running_secure_cluster(tmp_path_factory.mktemp("secure")) as cluster:
        yield cluster


def _request(
    cluster: SecureCluster,
    method: str,
    path: str,
    body: bytes | None = None,
    token: str | None = None,
) -> tuple[int, bytes]:
    """One HTTPS request to the first node, verified by the cluster's CA."""
    host, _, port = cluster.servers[0].rpartition(":")
    ctx = ssl.create_default_context(cafile=cluster.ca_file)
    conn = http.client.HTTPSConnection(host, int(port), timeout=TIMEOUT_S, context=ctx)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_nodes_listen_on_their_own_addresses(secure: SecureCluster) -> None:
    assert [s.rpartition(":")[0] for s in secure.servers] == HOSTS


async def test_produce_and_fetch_over_tls_with_the_client_token(secure: SecureCluster) -> None:
    async with RaftlogClient(
        secure.servers, auth_token=CLIENT_TOKEN, tls_ca_file=secure.ca_file
    ) as client:
        meta = await client.create_topic("secured", partitions=3, replication_factor=3)
        assert len(meta.partitions) == 3
        assert all(sorted(p.replicas) == [1, 2, 3] for p in meta.partitions)
        # clients learn leaders by the nodes' advertised addresses
        nodes = {n.node_id: n.address for n in (await client.metadata()).nodes}
        assert nodes == dict(zip([1, 2, 3], secure.servers, strict=True))
        written = {}
        for p in range(3):
            values = [f"p{p}-r{i}".encode() * (i + 1) for i in range(4)]
            r = await client.produce("secured", p, [(frame_records(values), len(values))])
            assert r.last_offset == r.base_offset + 3  # offsets count records
            written[p] = (r.base_offset, values)
        for p, (base, values) in written.items():
            fetched = await client.fetch("secured", p, 0)
            assert [b.base_offset for b in fetched.batches] == [base]
            got = [v for b in fetched.batches for v in unframe_records(b.payload, b.record_count)]
            assert got == values
            assert fetched.high_watermark == base + 4


async def test_a_node_asks_other_nodes_as_a_client_over_tls(secure: SecureCluster) -> None:
    """Watermarks of partitions on other nodes come from those nodes (the node calls
    their client routes with the client token, over TLS verified by the CA)."""
    async with RaftlogClient(
        secure.servers, auth_token=CLIENT_TOKEN, tls_ca_file=secure.ca_file
    ) as client:
        await client.create_topic("spread", partitions=3, replication_factor=1)
        ends = {}
        for p in range(3):
            r = await client.produce("spread", p, [(frame_records([b"x"] * (p + 1)), p + 1)])
            ends[p] = r.last_offset + 1
        answer = await client.send(
            secure.servers[0], MetadataRequest(["spread"], with_offsets=True), MetadataResponse
        )
    assert answer.node_id == 1
    (topic,) = answer.topics
    hosts = {p.partition: p.replicas for p in topic.partitions}
    assert sorted(r for rs in hosts.values() for r in rs) == [1, 2, 3]  # one per node
    assert {p.partition: p.high_watermark for p in topic.partitions} == ends


def test_a_client_without_the_token_is_refused(secure: SecureCluster) -> None:
    with (
        BlockingRaftlogClient(
            secure.servers, tls_ca_file=secure.ca_file, request_timeout_s=TIMEOUT_S
        ) as client,
        pytest.raises(UnauthorizedError) as info,
    ):
        client.list_topics()
    assert "the client token" in str(info.value) and "--auth-token" in str(info.value)
    assert "none was sent" in str(info.value)


def test_the_peer_token_is_refused_on_client_routes(secure: SecureCluster) -> None:
    with (
        BlockingRaftlogClient(
            secure.servers,
            auth_token=PEER_TOKEN,
            tls_ca_file=secure.ca_file,
            request_timeout_s=TIMEOUT_S,
        ) as client,
        pytest.raises(UnauthorizedError) as info,
    ):
        client.list_topics()
    assert "refuses the peer token" in str(info.value), info.value


def test_the_client_token_is_refused_on_the_replication_stream(secure: SecureCluster) -> None:
    # the auth check runs before the WebSocket handshake is looked at: a plain GET is
    # refused for its token alone, and the peer token gets past it (to the 400 of a
    # request that is no WebSocket upgrade)
    status, reply = _request(secure, "GET", STREAM_PATH, token=CLIENT_TOKEN)
    assert status == 403
    message = codec.decode(reply, ErrorResponse).message
    assert "refuses the client token" in message and "--peer-token" in message
    status, reply = _request(secure, "GET", STREAM_PATH)
    assert status == 401
    assert "none was sent" in codec.decode(reply, ErrorResponse).message
    status, _ = _request(secure, "GET", STREAM_PATH, token=PEER_TOKEN)
    assert status == 400


@pytest.mark.parametrize("path", ["/health", "/metrics"])
def test_status_routes_off_loopback_answer_only_to_a_token(
    secure: SecureCluster, path: str
) -> None:
    status, reply = _request(secure, "GET", path)
    assert status == 401
    message = codec.decode(reply, ErrorResponse).message
    assert f"{path} needs a token" in message and "--client-token" in message
    status, _ = _request(secure, "GET", path, token="not-a-token")
    assert status == 401
    for token in (CLIENT_TOKEN, ADMIN_TOKEN, PEER_TOKEN):
        status, reply = _request(secure, "GET", path, token=token)
        assert status == 200, reply[:200]
    if path == "/health":
        state = json.loads(reply)
        assert state["node_id"] == 1 and state["address"] == secure.servers[0]


def test_a_client_that_does_not_trust_the_ca_fails_at_once(
    secure: SecureCluster, tmp_path: pathlib.Path
) -> None:
    other_ca = make_certificates(tmp_path / "other", HOSTS)[2]
    started = time.monotonic()
    with (
        BlockingRaftlogClient(
            secure.servers,
            auth_token=CLIENT_TOKEN,
            tls_ca_file=other_ca,
            request_timeout_s=30.0,
        ) as client,
        pytest.raises(RaftlogError) as info,
    ):
        client.list_topics()
    assert time.monotonic() - started < 10.0  # not retried: every handshake fails alike
    message = str(info.value)
    assert "certificate verify failed" in message and "signed by the CA" in message


def test_a_plain_http_client_is_told_about_tls(secure: SecureCluster) -> None:
    with (
        BlockingRaftlogClient(
            secure.servers, auth_token=CLIENT_TOKEN, request_timeout_s=3.0
        ) as client,
        pytest.raises(RaftlogError) as info,
    ):
        client.list_topics()
    assert "drops plain HTTP" in str(info.value) and "tls_ca_file" in str(info.value)


def _server(
    tmp_path: pathlib.Path, *flags: str, listen: str = "127.0.0.1:1"
) -> subprocess.CompletedProcess[str]:
    """``raftlog server`` with ``flags``; each case here must fail before it binds."""
    argv = [sys.executable, "-m", "raftlog", "server", "--node-id", "1", "--listen", listen]
    return subprocess.run(
        [*argv, "--data-dir", str(tmp_path / "d"), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_bad_tls_and_token_flags_are_named(tmp_path: pathlib.Path) -> None:
    cert, key, ca = make_certificates(tmp_path / "tls", ["127.0.0.1"])
    cases = [
        (["--tls-cert", cert, "--tls-key", key], "missing: --tls-ca"),
        (
            ["--tls-cert", str(tmp_path / "nope.pem"), "--tls-key", key, "--tls-ca", ca],
            "--tls-cert: expected the path of a PEM file",
        ),
        (["--tls-cert", cert, "--tls-key", ca, "--tls-ca", ca], "--tls-cert/--tls-key"),
        (["--tls-cert", cert, "--tls-key", key, "--tls-ca", key], "--tls-ca: expected a PEM CA"),
        (["--auth-token", "a"], "--auth-token needs --peer-token"),
        (["--auth-token", "a", "--peer-token", "a"], "--peer-token must differ"),
        (["--advertise", "nohost"], "--advertise: expected HOST:PORT"),
    ]
    for flags, expected in cases:
        result = _server(tmp_path, *flags)
        assert result.returncode == 1, (flags, result.stderr)
        assert expected in result.stderr, (flags, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr


def test_a_node_off_127_0_0_1_needs_both_tokens(tmp_path: pathlib.Path) -> None:
    result = _server(tmp_path, listen="127.0.0.5:1")
    assert result.returncode == 1
    assert "requires a client token and a peer token" in result.stderr
    assert "Traceback" not in result.stderr


def _cli(secure: SecureCluster, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAFTLOG_")}
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args, "--servers", ",".join(secure.servers)],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=60,
        check=False,
    )


def test_the_cli_reaches_the_cluster_with_tls_ca_and_token(secure: SecureCluster) -> None:
    created = _cli(
        secure,
        "topic",
        "create",
        "cli-secured",
        "--partitions",
        "1",
        "--tls-ca",
        secure.ca_file,
        RAFTLOG_AUTH_TOKEN=CLIENT_TOKEN,
    )
    assert created.returncode == 0, created.stderr
    listed = _cli(
        secure, "topic", "list", "--auth-token", CLIENT_TOKEN, RAFTLOG_TLS_CA=secure.ca_file
    )
    assert listed.returncode == 0, listed.stderr
    assert "cli-secured" in listed.stdout.split()
    health = _cli(
        secure,
        "cluster",
        "health",
        "--format",
        "json",
        "--tls-ca",
        secure.ca_file,
        "--auth-token",
        CLIENT_TOKEN,
    )
    assert health.returncode == 0, health.stdout + health.stderr
    report = json.loads(health.stdout)
    assert sorted(n["address"] for n in report["nodes"]) == sorted(secure.servers)
    refused = _cli(secure, "topic", "list", "--tls-ca", secure.ca_file)
    assert refused.returncode == 1
    assert "the client token" in refused.stderr and "Traceback" not in refused.stderr
