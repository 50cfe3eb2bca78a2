"""Roles on a real cluster (issue 44, item 1 and the token items of item 5).

Three node processes on 127.0.0.2-4 with TLS and all three tokens
(``secure_cluster.py``). The issue's probes, as tests:

- a client (client token) registers ``127.0.0.1:<its own listener>`` as node 99:
  refused (403), the listener receives no request carrying the peer token within a
  bounded window, and a topic created afterwards places nothing on node 99;
- ``__transactions`` cannot be deleted, altered, grown or produced to, by a client
  or an admin;
- an admin call sent as a message on the client stream opened with the client
  token is refused under its id (the role is checked per message, not only at the
  upgrade);
- an ``Authorization`` header of bytes that are not UTF-8 gets a 401 (raw bytes on
  a TLS socket);
- no token appears on a node's command line (/proc/PID/cmdline), nor on a shard's
  (``--shards 2``) even when shard 0 was given them as flags;
- the CLI's admin commands need ``--admin-token`` / ``RAFTLOG_ADMIN_TOKEN`` /
  ``--admin-token-file``, and say so naming the role, flag and variable.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import aiohttp
import pytest
from secure_cluster import (
    ADMIN_TOKEN,
    CLIENT_TOKEN,
    PEER_TOKEN,
    SecureCluster,
    running_secure_cluster,
)
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from raftlog.client import (
    InvalidRequestError,
    RaftlogClient,
    UnauthorizedError,
    frame_records,
)
from raftlog.rpc import codec
from raftlog.rpc.messages import (
    CLIENT_STREAM_PATH,
    DeleteTopicRequest,
    ErrorCode,
    ErrorResponse,
    ListTopicsRequest,
    ListTopicsResponse,
)
from raftlog.rpc.peer import split_frame, stream_frame

TIMEOUT_S = 20.0
#: how long the probe's listener waits for a request carrying the peer token (the
#: issue saw 473 within 12 s)
LISTEN_WINDOW_S = 6.0
ADMIN_REFUSAL = "needs the admin role: send the admin token (--admin-token / RAFTLOG_ADMIN_TOKEN)"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    with running_secure_cluster(tmp_path_factory.mktemp("roles")) as cluster:
        yield cluster


def _client(secure: SecureCluster, **tokens: str) -> RaftlogClient:
    return RaftlogClient(
        secure.servers, tls_ca_file=secure.ca_file, request_timeout_s=TIMEOUT_S, **tokens
    )


class _Listener:
    """A TCP listener on 127.0.0.1 that records every byte it is sent (the probe's
    stand-in for a client's own server); closed by the fixture."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received = bytearray()
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.settimeout(0.5)
            with conn:
                try:
                    while chunk := conn.recv(65536):
                        self.received += chunk
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(5.0)


@pytest.fixture
def listener() -> Iterator[_Listener]:
    it = _Listener()
    try:
        yield it
    finally:
        it.close()


async def test_a_client_cannot_register_a_node_nor_get_the_peer_token(
    secure: SecureCluster, listener: _Listener
) -> None:
    address = f"127.0.0.1:{listener.port}"
    async with _client(secure, auth_token=CLIENT_TOKEN) as client:
        with pytest.raises(UnauthorizedError) as info:
            await client.register_node(99, address)
        assert f"register_node {ADMIN_REFUSAL}" in str(info.value)
        assert "refuses the client token" in str(info.value)
        # bounded window: nothing that carries the peer token arrives
        await asyncio.sleep(LISTEN_WINDOW_S)
        assert PEER_TOKEN.encode() not in listener.received
        assert b"/raft/" not in listener.received
        assert listener.connections == 0
        meta = await client.create_topic("after-probe", partitions=6, replication_factor=3)
        assert all(99 not in p.replicas for p in meta.partitions)
        assert 99 not in {n.node_id for n in (await client.metadata()).nodes}


async def test_the_probe_over_http_gets_403(secure: SecureCluster) -> None:
    """The same refusal as a plain POST: status 403 and the role named."""
    from raftlog.rpc.messages import RegisterNodeRequest

    status, reply = await _post(
        secure, "register_node", codec.encode(RegisterNodeRequest(99, "127.0.0.1:9")), CLIENT_TOKEN
    )
    assert status == 403
    assert ADMIN_REFUSAL in codec.decode(reply, ErrorResponse).message


async def _post(secure: SecureCluster, route: str, body: bytes, token: str) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=secure.ca_file)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"https://{secure.servers[0]}/v1/{route}",
            data=body,
            headers={"Authorization": f"Bearer {token}"},
            ssl=ctx,
            timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
        ) as resp,
    ):
        return resp.status, await resp.read()


async def test_internal_topics_refuse_delete_alter_grow_and_produce(
    secure: SecureCluster,
) -> None:
    async with _client(secure, auth_token=CLIENT_TOKEN, admin_token=ADMIN_TOKEN) as client:
        # the coordinator client's own creation, in the internal topic's fixed shape
        await client.create_topic("__transactions", 1, 3, exist_ok=True)
        for call in (
            client.delete_topic("__transactions"),
            client.alter_config("__transactions", {"retention.ms": "1000"}),
            client.create_partitions("__transactions", 4),
            client.produce("__transactions", 0, [(frame_records([b"x"]), 1)]),
        ):
            with pytest.raises(InvalidRequestError) as info:
                await call
            message = str(info.value)
            assert "topic '__transactions' is internal" in message, message
            assert "through the client API" in message
        for name, partitions in (("__consumer_offsets", 1), ("__transactions", 5)):
            with pytest.raises(InvalidRequestError, match="is internal"):
                await client.create_topic(name, partitions, 1)
        assert "__transactions" in await client.list_topics()
        assert "__consumer_offsets" not in await client.list_topics()
    async with _client(secure, auth_token=CLIENT_TOKEN) as client:
        with pytest.raises(UnauthorizedError, match=re.escape(f"delete_topic {ADMIN_REFUSAL}")):
            await client.delete_topic("__transactions")


async def test_the_client_stream_checks_each_messages_role(secure: SecureCluster) -> None:
    async with _client(secure, auth_token=CLIENT_TOKEN, admin_token=ADMIN_TOKEN) as admin:
        await admin.create_topic("stream-guarded", partitions=1, replication_factor=1)
    ctx = ssl.create_default_context(cafile=secure.ca_file)
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(
            f"wss://{secure.servers[0]}{CLIENT_STREAM_PATH}",
            headers={"Authorization": f"Bearer {CLIENT_TOKEN}"},
            ssl=ctx,
        ) as ws,
    ):
        await ws.send_bytes(stream_frame(7, DeleteTopicRequest("stream-guarded")))
        await ws.send_bytes(stream_frame(8, ListTopicsRequest()))
        answers = {}
        for _ in range(2):
            msg = await ws.receive(timeout=TIMEOUT_S)
            request_id, body = split_frame(msg.data)
            answers[request_id] = codec.decode(body)
    refused = answers[7]
    assert isinstance(refused, ErrorResponse) and refused.code is ErrorCode.UNAUTHORIZED
    assert refused.message.startswith(f"delete_topic {ADMIN_REFUSAL}")
    assert "refuses the client token" in refused.message
    listed = answers[8]  # the stream serves on: a client call on it is answered
    assert isinstance(listed, ListTopicsResponse) and "stream-guarded" in listed.names


async def test_a_move_ends_through_the_nodes_own_token(secure: SecureCluster) -> None:
    """The partition's leader ends a move at the controller (complete_move, an admin
    route) with the peer token: a move an admin starts finishes on a cluster where
    every role has its own token."""
    async with _client(secure, auth_token=CLIENT_TOKEN, admin_token=ADMIN_TOKEN) as admin:
        meta = await admin.create_topic("moving", partitions=1, replication_factor=1)
        (source,) = meta.partitions[0].replicas
        target = 1 if source != 1 else 2
        await admin.produce("moving", 0, [(frame_records([b"kept"]), 1)])
        assert not await admin.move_partition("moving", 0, [target])
        done = False
        deadline = time.monotonic() + 60.0
        while not done and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            done = await admin.move_partition("moving", 0, [target])
        assert done, "the move did not end within 60 s (complete_move refused?)"
        fetched = await admin.fetch("moving", 0, 0)
        assert [b.payload for b in fetched.batches] == [frame_records([b"kept"])]


def test_a_non_utf8_authorization_header_gets_401(secure: SecureCluster) -> None:
    host, _, port = secure.servers[0].rpartition(":")
    ctx = ssl.create_default_context(cafile=secure.ca_file)
    for path in (b"/v1/list_topics", b"/raft/stream", b"/health"):
        request = (
            b"POST " + path + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"
            b"Authorization: Bearer \xff\xfe\xc3\x28" + CLIENT_TOKEN.encode() + b"\r\n"
            b"Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
        with (
            socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as raw,
            ctx.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.sendall(request)
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
        status_line = answer.split(b"\r\n", 1)[0]
        assert status_line.startswith(b"HTTP/1.1 401"), (path, answer[:300])
        body = answer.split(b"\r\n\r\n", 1)[1]
        message = codec.decode(body, ErrorResponse).message
        assert "Authorization header is malformed" in message, message
        assert b"Traceback" not in answer


def _cmdline(pid: int) -> str:
    return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_no_token_on_a_local_nodes_command_line(secure: SecureCluster) -> None:
    for pid in secure.pids:
        line = _cmdline(pid)
        assert "raftlog" in line and "server" in line, line
        for token in (CLIENT_TOKEN, ADMIN_TOKEN, PEER_TOKEN):
            assert token not in line, (pid, line)


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


@pytest.fixture
def sharded_node(tmp_path: pathlib.Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``raftlog server --shards 2`` given its tokens as flags (a user's choice for
    shard 0); stopped by PID."""
    port = _free_port()
    address = f"127.0.0.1:{port}"
    argv = [
        sys.executable, "-m", "raftlog", "server", "--node-id", "1", "--listen", address,
        "--data-dir", str(tmp_path / "d"), "--shards", "2",
        "--auth-token", CLIENT_TOKEN, "--admin-token=" + ADMIN_TOKEN,
        "--peer-token", PEER_TOKEN,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTLOG_")}
    with open(tmp_path / "node.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        yield proc, address
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def test_no_token_on_a_shards_command_line(
    sharded_node: tuple[subprocess.Popen[bytes], str],
) -> None:
    import urllib.request

    proc, address = sharded_node

    def shards() -> list[dict[str, object]]:
        assert proc.poll() is None, "the node exited"
        with urllib.request.urlopen(f"http://{address}/health", timeout=2) as resp:
            return json.loads(resp.read())["shards"]

    found = Retrying(
        stop=stop_after_delay(90),
        wait=wait_fixed(0.5),
        retry=retry_if_exception_type(OSError),
        reraise=True,
    )(shards)
    shard_pids = [int(s["pid"]) for s in found if s["shard"] != 0]
    assert len(shard_pids) == 1
    line = _cmdline(shard_pids[0])
    assert "--shard-index" in line, line
    for token in (CLIENT_TOKEN, ADMIN_TOKEN, PEER_TOKEN):
        assert token not in line, line
    assert not [a for a in line.split() if a.startswith("--") and "token" in a], line
    # the shard runs with them all the same: a forwarded call is answered
    environ = pathlib.Path(f"/proc/{shard_pids[0]}/environ").read_bytes().split(b"\0")
    assert f"RAFTLOG_PEER_TOKEN={PEER_TOKEN}".encode() in environ


def _cli(secure: SecureCluster, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAFTLOG_")}
    argv = [sys.executable, "-m", "raftlog", *args, "--servers", ",".join(secure.servers)]
    return subprocess.run(
        [*argv, "--tls-ca", secure.ca_file, "--auth-token", CLIENT_TOKEN],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=120,
        check=False,
    )


def test_cli_admin_commands_need_the_admin_token(
    secure: SecureCluster, tmp_path: pathlib.Path
) -> None:
    created = _cli(secure, "topic", "create", "cli-admin", "--partitions", "1")
    assert created.returncode == 0, created.stderr
    refused = {
        "delete_topic": ["topic", "delete", "cli-admin"],
        "alter_config": ["topic", "alter-config", "cli-admin", "--config", "retention.ms=60000"],
        "create_partitions": ["topic", "add-partitions", "cli-admin", "--partitions", "2"],
        "transfer_leadership": ["partition", "transfer-leadership", "cli-admin/0", "--to", "2"],
        "move_partition": ["partition", "move", "cli-admin/0", "--replicas", "2"],
        "decommission_node": ["cluster", "decommission", "3"],
    }
    for route, args in refused.items():
        result = _cli(secure, *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert f"{route} {ADMIN_REFUSAL}" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    # with the admin token: by flag, by variable, by file
    ok = _cli(
        secure, "topic", "alter-config", "cli-admin", "--config", "retention.ms=60000",
        "--admin-token", ADMIN_TOKEN,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    ok = _cli(
        secure, "topic", "add-partitions", "cli-admin", "--partitions", "2",
        RAFTLOG_ADMIN_TOKEN=ADMIN_TOKEN,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    token_file = tmp_path / "admin-token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    ok = _cli(secure, "topic", "delete", "cli-admin", "--admin-token-file", str(token_file))
    assert ok.returncode == 0, ok.stderr
    listed = _cli(secure, "topic", "list")
    assert "cli-admin" not in listed.stdout.split()
    empty = tmp_path / "empty"
    empty.write_text("")
    bad = _cli(secure, "topic", "delete", "x", "--admin-token-file", str(empty))
    assert bad.returncode == 1 and "--admin-token-file" in bad.stderr and "empty" in bad.stderr
    wrong = _cli(secure, "topic", "delete", "x", "--admin-token", "not-it")
    assert wrong.returncode == 1
    assert "delete_topic needs the admin role" in wrong.stderr, wrong.stderr


@pytest.fixture
def token_cluster(tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> Iterator[object]:
    """A 1-node local cluster with a client token (and, parametrized indirectly, extra
    server flags): start_cluster makes its peer and admin tokens and records them;
    every node stopped by PID."""
    from raftlog.cluster import pid_alive, start_cluster, stop_cluster, stop_node

    cluster = start_cluster(
        tmp_path / "local",
        1,
        auth_token=CLIENT_TOKEN,
        extra_args=list(getattr(request, "param", None) or []) or None,
        timeout_s=60.0,
    )
    try:
        yield cluster
    finally:
        stop_cluster(cluster.data_dir, timeout_s=10.0)
        from raftlog.cluster import load_cluster

        for node in (load_cluster(cluster.data_dir) or cluster).nodes:
            if pid_alive(node.pid):
                stop_node(node, signal.SIGKILL, timeout_s=5.0)


def test_local_add_node_registers_with_the_admin_token(token_cluster) -> None:
    from raftlog.cluster import ClusterError, add_node, forget_node, load_cluster

    recorded = load_cluster(token_cluster.data_dir)
    assert recorded is not None and recorded.admin_token
    assert len({recorded.auth_token, recorded.admin_token, recorded.peer_token}) == 3
    with pytest.raises(ClusterError) as info:
        add_node(token_cluster.data_dir, timeout_s=30.0, admin_token="not-the-admin-token")
    assert "register_node needs the admin role" in str(info.value)
    assert "--admin-token" in str(info.value)
    # the refused node runs on, unregistered, campaigning in a controller group of its
    # own making: stopped (by PID) and dropped, so it cannot disturb the next join
    forget_node(token_cluster.data_dir, 2)
    node = add_node(token_cluster.data_dir, timeout_s=60.0)  # the recorded admin token
    line = _cmdline(node.pid)
    for token in (recorded.auth_token, recorded.admin_token, recorded.peer_token):
        assert token not in line


@pytest.mark.parametrize("token_cluster", [["--auto-create-topics-enable", "false"]], indirect=True)
async def test_create_topic_is_an_admin_call_when_auto_create_is_off(token_cluster) -> None:
    from raftlog.cluster import load_cluster

    recorded = load_cluster(token_cluster.data_dir)
    assert recorded is not None and recorded.admin_token
    servers = recorded.servers
    async with RaftlogClient(servers, auth_token=CLIENT_TOKEN, request_timeout_s=TIMEOUT_S) as c:
        with pytest.raises(UnauthorizedError) as info:
            await c.create_topic("not-auto", partitions=1, replication_factor=1)
        assert f"create_topic {ADMIN_REFUSAL}" in str(info.value)
    async with RaftlogClient(
        servers,
        auth_token=CLIENT_TOKEN,
        admin_token=recorded.admin_token,
        request_timeout_s=TIMEOUT_S,
    ) as admin:
        meta = await admin.create_topic("not-auto", partitions=1, replication_factor=1)
        assert len(meta.partitions) == 1
