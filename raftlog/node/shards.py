"""A node in several processes: ``raftlog server --shards N``, as Redpanda's shard per core.

The process a user starts is shard 0. It starts shards 1..N-1 as child processes
(``--shard-index K``), each serving on a loopback port of its own; shard 0 alone
serves the node's address (``--listen``), so peers and clients see one node.

Ownership: group G belongs to shard ``G % N`` (:func:`shard_of`), so the controller
(group 0) is shard 0's. A shard opens, replicates, fsyncs and serves only its own
groups, in its own process and event loop: N shards use N cores.

Routing, all in shard 0 (:class:`ShardSet`):

- a peer request for a group of shard K goes to K over one replication stream
  (the WebSocket protocol of :mod:`raftlog.rpc.transport`, as between nodes) and its
  reply comes back the same way; a heartbeat batch is split by owner and the
  replies are joined in the request's order;
- a client call on one partition (produce, fetch, offsets, producer sessions,
  transactions, the coordinator) goes to the owning shard as it came (a large one
  with its caller's token; a small one on shard 0's stream, which carries the peer
  token), and its answer goes back as it is;
- a shard's command line is shard 0's without the token flags: the tokens reach it
  in its environment (:func:`shard_environment`), never in argv;
- calls on the cluster (topics, configs, metadata, moves, nodes) are shard 0's, the
  controller's host; metadata and partition status ask the other shards for the
  status of their partitions.

Shards K > 0 send their own peer traffic straight to the other nodes' addresses.
They mirror the controller state (a ControllerStm restored from shard 0's
snapshots, :class:`raftlog.rpc.peer.ShardStateRequest`, sent at start and after
every change), so they open and close their groups as the controller says.

Lifecycle invariants:

- shard 0 serves the node's address only once every shard serves;
- a shard dies with shard 0 (``PR_SET_PDEATHSIG`` on Linux, and the end of its
  stdin anywhere): a killed node leaves no process behind holding its logs;
- a shard that exits on its own stops the whole node (exit status 1): a node is
  restarted whole, never in part;
- stopping shard 0 (SIGTERM) stops every shard by its PID, SIGKILL after
  ``STOP_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from tenacity import AsyncRetrying, retry_if_exception_type, wait_fixed

from raftlog.node.config import NodeConfig
from raftlog.raft.errors import TransportError
from raftlog.raft.heartbeat_manager import unavailable_reply
from raftlog.raft.messages import (
    AppendEntriesRequest,
    HeartbeatBatchReply,
    HeartbeatBatchRequest,
    InstallSnapshotRequest,
    TimeoutNowRequest,
    VoteRequest,
)
from raftlog.rpc import codec
from raftlog.rpc.messages import (
    CLIENT_ROUTES,
    CLIENT_STREAM_PATH,
    STREAM_MAX_REQUEST_BYTES,
    ErrorResponse,
)
from raftlog.rpc.peer import ShardStateRequest
from raftlog.rpc.roles import CLIENT_TOKEN_ALIAS, TOKEN_FLAGS, Role
from raftlog.rpc.server import CONTENT_TYPE, RequestError, status_of_answer
from raftlog.rpc.transport import (
    AUTH_HEADER,
    FrameStream,
    StreamPool,
    StreamTransport,
    UnmaskedWebSocket,
    open_frame_stream,
    timed_request,
)

log = logging.getLogger("raftlog.node.shards")

#: how long a starting shard may take to serve (imports, opening its logs)
START_TIMEOUT_S = 60.0
#: how long a stopping shard may take before it is killed
STOP_TIMEOUT_S = 15.0
#: bounds a forwarded client call: above the clients' own attempt timeouts
FORWARD_TIMEOUT_S = 120.0
#: Shard 0 tells every other shard it is alive this often (an empty ShardStateRequest).
FRONT_PING_S = 0.25
#: A shard K > 0 that has not heard from shard 0 for this long stops sending raft
#: traffic (see :class:`FrontWatch`): all of the node's incoming traffic goes
#: through shard 0, so a hung shard 0 (SIGSTOP, a stall) must not leave shard K leading
#: groups that clients cannot reach. Its leaders then lose their quorum and step down,
#: and the other nodes elect new ones, as when a whole node stops.
FRONT_SILENCE_S = 3.0
#: the environment variable that tells a shard its parent's PID
PARENT_ENV = "RAFTLOG_SHARD_PARENT"
#: what a shard prints on its stdout once it serves: ``READY_PREFIX PORT``
READY_PREFIX = "raftlog-shard-serving"

_PR_SET_PDEATHSIG = 1


def shard_of(group_id: int, shards: int) -> int:
    """The shard that owns ``group_id`` on a node of ``shards`` processes."""
    return group_id % shards


@dataclasses.dataclass
class _Shard:
    index: int
    process: asyncio.subprocess.Process
    address: str = ""  # 127.0.0.1:PORT once it serves


class ShardError(RuntimeError):
    """A shard did not start, or a call to it failed."""


#: Peer requests of one group (its id their first field) that shard 0 relays undecoded.
_RELAYED = frozenset({AppendEntriesRequest, VoteRequest, TimeoutNowRequest, InstallSnapshotRequest})


class ShardSet:
    """Shard 0's side: the node's other shards, their processes and the links to them.

    ``argv`` is the command line of shard 0 after the program (``server ...``);
    each shard runs it again with ``--shards N --shard-index K``.
    """

    def __init__(self, config: NodeConfig, argv: list[str]) -> None:
        self.config = config
        self.count = config.shards
        self._argv = list(argv)
        self._shards: dict[int, _Shard] = {}
        self._transport: StreamTransport | None = None
        self._session: aiohttp.ClientSession | None = None
        # shard 0's client streams to the others, for the calls it forwards
        self._client_streams = StreamPool[int]("the node is stopping")
        self._watchers: list[asyncio.Task[None]] = []
        self._pusher: asyncio.Task[None] | None = None
        self._pinger: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._snapshot: Callable[[], bytes] | None = None
        self._version = 0
        # The newest controller state, as every shard is sent it (None before the first).
        self._latest: ShardStateRequest | None = None
        self._stopping = False
        self.failed: str | None = None  # why a shard's exit stopped the node

    # ------------------------------------------------------------ lifecycle

    async def start(self, on_exit: Callable[[], None]) -> None:
        """Start shards 1..N-1 and wait until each serves; ``on_exit`` is called
        when one exits on its own. Raises ShardError naming a shard that did not
        start (the others are stopped)."""
        env = shard_environment(self.config)
        env[PARENT_ENV] = str(os.getpid())
        argv = without_token_flags(self._argv)
        try:
            for k in range(1, self.count):
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "raftlog",
                    *argv,
                    "--shards",
                    str(self.count),
                    "--shard-index",
                    str(k),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    env=env,
                )
                self._shards[k] = _Shard(k, process)
            await asyncio.gather(*(self._await_serving(s) for s in self._shards.values()))
        except BaseException:
            await self.stop()
            raise
        self._transport = StreamTransport(
            self.config.node_id,
            {k: s.address for k, s in self._shards.items()},
            peer_token=self.config.peer_token,
            timeout_s=5.0,
        )
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S),
            ws_response_class=UnmaskedWebSocket,
        )
        loop = asyncio.get_running_loop()
        self._watchers = [loop.create_task(self._watch(s, on_exit)) for s in self._shards.values()]
        self._pinger = loop.create_task(self._ping_loop(), name="shard-pings")
        log.info(
            "node %d runs %d shards: %s",
            self.config.node_id,
            self.count,
            ", ".join(f"{k}: pid {s.process.pid} on {s.address}" for k, s in self._shards.items()),
        )

    async def _await_serving(self, shard: _Shard) -> None:
        assert shard.process.stdout is not None
        try:
            line = await asyncio.wait_for(shard.process.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            raise ShardError(
                f"shard {shard.index} (pid {shard.process.pid}) did not serve within "
                f"{START_TIMEOUT_S:g} s"
            ) from None
        words = line.decode(errors="replace").split()
        if len(words) != 2 or words[0] != READY_PREFIX or not words[1].isdigit():
            rc = await shard.process.wait()
            raise ShardError(
                f"shard {shard.index} (pid {shard.process.pid}) exited with status {rc} "
                "before it served (its log is above)"
            )
        shard.address = f"127.0.0.1:{words[1]}"

    async def _watch(self, shard: _Shard, on_exit: Callable[[], None]) -> None:
        rc = await shard.process.wait()
        if self._stopping:
            return
        self.failed = f"shard {shard.index} (pid {shard.process.pid}) exited with status {rc}"
        log.critical("%s: stopping the node", self.failed)
        on_exit()

    async def stop(self) -> None:
        """Stop every shard by its PID: SIGTERM, then SIGKILL after STOP_TIMEOUT_S."""
        self._stopping = True
        for task in (self._pusher, self._pinger):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._transport is not None:
            await self._transport.close()
        await self._client_streams.close()
        if self._session is not None:
            await self._session.close()
        procs = [s.process for s in self._shards.values() if s.process.returncode is None]
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                await asyncio.wait_for(p.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                log.error("shard pid %d did not stop in %g s: killing it", p.pid, STOP_TIMEOUT_S)
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                await p.wait()
        for w in self._watchers:
            w.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)

    def describe(self) -> list[dict[str, Any]]:
        """Shards 1..N-1: index, PID and loopback address (for ``/health``)."""
        return [
            {"shard": k, "pid": s.process.pid, "address": s.address}
            for k, s in sorted(self._shards.items())
        ]

    # ------------------------------------------------------------ controller mirror

    def mirror_controller(self, snapshot: Callable[[], bytes]) -> None:
        """Send the controller state (``snapshot()``) to every shard now and after
        each :meth:`controller_changed`, until each has it."""
        self._snapshot = snapshot
        self._changed.set()
        self._pusher = asyncio.get_running_loop().create_task(self._push_loop())

    def controller_changed(self) -> None:
        self._changed.set()

    async def _ping_loop(self) -> None:
        """Tell every shard that shard 0 is alive, every FRONT_PING_S (until cancelled)."""
        assert self._transport is not None
        ping = ShardStateRequest(0, b"")  # version 0: never newer than a mirrored state
        while True:
            await asyncio.gather(
                *(self._transport.send(k, ping) for k in self._shards), return_exceptions=True
            )
            await asyncio.sleep(FRONT_PING_S)

    async def _push_loop(self) -> None:
        assert self._snapshot is not None
        while True:
            await self._changed.wait()
            self._changed.clear()
            self._version += 1
            self._latest = ShardStateRequest(self._version, self._snapshot())
            await asyncio.gather(*(self._push(k) for k in self._shards))

    async def _push(self, shard: int) -> None:
        """Deliver the controller state of this round to ``shard``, retrying until it takes
        it (a change made meanwhile goes in the next round, once every shard took this
        one). The one retry layer: a shard that stays unreachable is one that died,
        which stops the node (:attr:`failed`)."""
        assert self._transport is not None
        async for attempt in AsyncRetrying(
            wait=wait_fixed(0.2),
            retry=retry_if_exception_type(TransportError),
            before_sleep=lambda state: log.warning(
                "shard %d: controller state not taken yet: %r",
                shard,
                state.outcome.exception() if state.outcome else None,
            ),
        ):
            with attempt:
                assert self._latest is not None
                await self._transport.send(shard, self._latest)

    # ------------------------------------------------------------ routing

    def owner(self, group_id: int) -> int:
        return shard_of(group_id, self.count)

    async def route_peer(self, message: Any, local: Callable[[Any], Awaitable[Any]]) -> Any:
        """The reply to a peer request, from the shard that owns its group
        (``local`` handles shard 0's). A heartbeat batch is split by owner; the
        heartbeats of a shard that cannot be reached answer "group unavailable"."""
        if isinstance(message, HeartbeatBatchRequest):
            return await self._route_heartbeats(message, local)
        shard = self.owner(message.group)
        if shard == 0:
            return await local(message)
        assert self._transport is not None
        return await self._transport.send(shard, message)

    async def relay_peer(self, body: memoryview) -> memoryview | None:
        """The reply's codec bytes to the encoded peer request ``body`` when another
        shard owns its group: relayed as it came, not decoded and encoded again here
        (a MiB-sized append was checksummed and copied twice more on shard 0); None
        when shard 0 answers it (its own group, a heartbeat batch to split, the
        shards' state). A malformed ``body`` is a CodecError."""
        peeked = codec.leading_int(body)
        if peeked is None or peeked[0] not in _RELAYED:
            return None
        shard = self.owner(peeked[1])
        if shard == 0:
            return None
        assert self._transport is not None
        return await self._transport.send_encoded(shard, body)

    async def _route_heartbeats(
        self, req: HeartbeatBatchRequest, local: Callable[[Any], Awaitable[Any]]
    ) -> HeartbeatBatchReply:
        transport = self._transport
        assert transport is not None
        positions: dict[int, list[int]] = {}
        for i, hb in enumerate(req.heartbeats):
            positions.setdefault(self.owner(hb.group), []).append(i)
        shards = sorted(positions)

        async def ask(shard: int) -> HeartbeatBatchReply:
            part = HeartbeatBatchRequest(
                req.source_node, req.target_node, [req.heartbeats[i] for i in positions[shard]]
            )
            if shard == 0:
                return await local(part)
            return await transport.send(shard, part)

        answers = await asyncio.gather(*(ask(s) for s in shards), return_exceptions=True)
        replies: list[Any] = [None] * len(req.heartbeats)
        for shard, answer in zip(shards, answers, strict=True):
            for n, i in enumerate(positions[shard]):
                if isinstance(answer, BaseException):
                    replies[i] = unavailable_reply(req.heartbeats[i])
                else:
                    replies[i] = answer.replies[n]
        return HeartbeatBatchReply(self.config.node_id, req.source_node, replies)

    async def forward_client(
        self, shard: int, route: str, body: bytes | memoryview, authorization: str
    ) -> tuple[int, bytes | memoryview]:
        """(HTTP status, body) of a client call as shard ``shard`` answers it.

        A small call goes on shard 0's client stream to that shard, as a client
        sends one (a POST per call took twice the time of the call itself: with
        ``--shards 2``, 100-byte produces to a partition of shard 1 ran at half the
        rate of those to shard 0's); a large one as a POST, on a pooled connection
        of its own. The caller's token was checked by shard 0; the stream presents
        shard 0's own."""
        assert self._session is not None
        if len(body) <= STREAM_MAX_REQUEST_BYTES:
            try:
                answer = await timed_request(
                    lambda: self._client_streams.get(shard, lambda: self._open_stream(shard)),
                    lambda stream: stream.request_encoded(body),
                    FORWARD_TIMEOUT_S,
                )
            except (TransportError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise ShardError(f"shard {shard} did not answer {route}: {exc!r}") from exc
            return status_of_answer(answer), answer
        headers = {"Content-Type": CONTENT_TYPE}
        if authorization:
            headers[AUTH_HEADER] = authorization
        url = f"http://{self._shards[shard].address}/v1/{route}"
        try:
            async with self._session.post(url, data=body, headers=headers) as resp:
                return resp.status, await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ShardError(f"shard {shard} did not answer {route}: {exc!r}") from exc

    async def _open_stream(self, shard: int) -> FrameStream:
        """Shard 0's client stream to ``shard``."""
        assert self._session is not None
        headers = {}
        if self.config.peer_token:
            headers[AUTH_HEADER] = self._client_authorization()
        return await open_frame_stream(
            self._session,
            f"ws://{self._shards[shard].address}{CLIENT_STREAM_PATH}",
            f"shard {shard}",
            headers=headers,
            max_msg_size=0,  # the shard's answers (a fetch's can be large)
        )

    async def call(self, shard: int, request: Any, reply_type: type) -> Any:
        """A client call made by shard 0 itself (e.g. partition status) to ``shard``."""
        route = CLIENT_ROUTES[type(request)]
        status, body = await self.forward_client(
            shard, route, codec.encode(request), self._client_authorization()
        )
        if status != 200:
            try:
                refusal = codec.decode(body, ErrorResponse)
            except codec.CodecError:
                raise ShardError(f"shard {shard} answered {route} with HTTP {status}") from None
            # the shard's refusal, code and all (a marker's caller tells FENCED from
            # NOT_LEADER)
            raise RequestError(
                refusal.code, refusal.message, refusal.leader_id, refusal.leader_address
            )
        return codec.decode(body, reply_type)

    async def get(self, shard: int, path: str) -> bytes:
        """The body of ``GET path`` (``/health``, ``/metrics``) of ``shard``."""
        assert self._session is not None
        headers = {}
        if self.config.peer_token:
            headers[AUTH_HEADER] = self._client_authorization()
        url = f"http://{self._shards[shard].address}{path}"
        try:
            async with self._session.get(url, headers=headers, timeout=_STATUS_TIMEOUT) as resp:
                if resp.status != 200:
                    raise ShardError(f"shard {shard} answered {path} with HTTP {resp.status}")
                return await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ShardError(f"shard {shard} did not answer {path}: {exc!r}") from exc

    def _client_authorization(self) -> str:
        # shard 0's own calls and its streams to the shards carry the node's identity,
        # the peer token (raftlog.rpc.roles.PEER_CALLS: the calls it forwards); each
        # call's role was checked by shard 0 before it was forwarded
        token = self.config.peer_token
        return f"Bearer {token}" if token else ""

    @property
    def others(self) -> list[int]:
        return sorted(self._shards)


_STATUS_TIMEOUT = aiohttp.ClientTimeout(total=5.0)

#: Every token flag of ``raftlog server`` (raftlog.node.config.add_token_arguments).
_TOKEN_FLAGS = (
    *(name for flag, _env in TOKEN_FLAGS.values() for name in (flag, f"{flag}-file")),
    CLIENT_TOKEN_ALIAS[0],
)


def without_token_flags(argv: list[str]) -> list[str]:
    """``argv`` without its token flags and their values (``--X-token T``,
    ``--X-token=T``, ``--X-token-file P``, ``--auth-token``, and argparse's unique
    abbreviations of them): a shard's command line is readable by every local
    user (``ps``, /proc/PID/cmdline); the tokens go in its environment instead
    (:func:`shard_environment`)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name, eq, _value = arg.partition("=")
        if (
            len(name) > 2
            and name.startswith("--")
            and any(flag.startswith(name) for flag in _TOKEN_FLAGS)
        ):
            skip = not eq
            continue
        out.append(arg)
    return out


def shard_environment(config: NodeConfig) -> dict[str, str]:
    """This process's environment with the node's tokens as resolved (whether they
    came from flags, files or the environment) in RAFTLOG_CLIENT_TOKEN,
    RAFTLOG_ADMIN_TOKEN and RAFTLOG_PEER_TOKEN, for a shard it starts."""
    env = dict(os.environ)
    env.pop(CLIENT_TOKEN_ALIAS[1], None)  # the client token goes under its own name
    for role, token in (
        (Role.CLIENT, config.auth_token),
        (Role.ADMIN, config.admin_token),
        (Role.PEER, config.peer_token),
    ):
        env.pop(TOKEN_FLAGS[role][1], None)
        if token:
            env[TOKEN_FLAGS[role][1]] = token
    return env


# ---------------------------------------------------------------- a shard's own side


class FrontWatch:
    """A shard K > 0's view of shard 0: when it last heard from it (any
    ShardStateRequest, pings included). Used as its transport's gate."""

    def __init__(self, silence_s: float = FRONT_SILENCE_S) -> None:
        self._silence_s = silence_s
        self._heard = time.monotonic()  # start-up counts: shard 0 pings once all serve

    def heard(self) -> None:
        self._heard = time.monotonic()

    def refusal(self) -> str | None:
        """Why raft traffic must not go out now (shard 0 silent too long), or None."""
        silent = time.monotonic() - self._heard
        if silent <= self._silence_s:
            return None
        return (
            f"shard 0 of this node has been silent for {silent:.1f} s (over "
            f"{self._silence_s:g} s): this shard sends no raft traffic until it is heard"
        )


def die_with_parent() -> None:
    """Make this shard die with shard 0: the kernel's parent-death signal on Linux,
    and the end of stdin (shard 0 holds its other end) everywhere. Exits at once if
    shard 0 is already gone."""
    parent = int(os.environ.get(PARENT_ENV, "0") or 0)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent and os.getppid() != parent:
        os._exit(1)
    loop = asyncio.get_running_loop()

    def parent_gone() -> None:
        try:
            data = os.read(sys.stdin.fileno(), 4096)
        except OSError:
            data = b""
        if not data:
            # a crash of the node: no clean stop, as the parent's own death was not one
            os._exit(1)

    loop.add_reader(sys.stdin.fileno(), parent_gone)


def report_serving(port: int) -> None:
    """Tell shard 0 this shard serves on loopback ``port`` (one stdout line)."""
    sys.stdout.write(f"{READY_PREFIX} {port}\n")
    sys.stdout.flush()
    # shard 0 reads no further: anything printed later goes to the log, and a full
    # pipe can never block this shard
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
