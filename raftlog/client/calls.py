"""The async client: admin, produce, fetch, with leader discovery and retries.

Every call is one codec-framed request to a node, answered by the framed
response or a framed ErrorResponse: a frame on the node's client stream (one
WebSocket per node at ``/v1/stream``, calls multiplexed by request id, as on
the replication stream) when it is small, else an HTTP POST to ``/v1/<call>``.
A node that refuses the stream's handshake (a wrong token) is asked by POST,
whose answer says what is wrong.

Routing: partition calls go to the partition's leader as last seen in
metadata; controller calls (create/delete topic) go to the controller leader.
A NOT_LEADER reply carries the leader when the node knows it, and the client
follows it. Retriable failures (not leader, no leader yet, timeouts, refused
connections) are retried with exponential backoff (tenacity) until
``request_timeout_s`` has passed in total; every other error surfaces at once
as a :class:`RaftlogError` subclass with the server's message.

Refused connections fail fast. When every server the client knows refuses the
connection (nothing listens: a wrong address, a cluster not started) and no
server has ever answered this client, the call fails at once with a
:class:`ClusterUnavailableError` naming the addresses: nothing suggests that
anything will come up there, and waiting the whole request timeout only hides
the mistake. Once any server has answered this client, a refusal means a node
that is restarting (or a leader that just died while others live), so it is
retried as above until the request timeout.

Each HTTP attempt has its own, shorter bound (``attempt_timeout_s``, by
default ``min(request_timeout_s / 3, 10 s)``) and never outlives the call's
overall deadline, so one hung connection costs an attempt, not the whole
budget: the call is retried (on a fresh leader lookup) within the deadline.

Security: ``auth_token`` (the client token) is sent as ``Authorization: Bearer``
on every call, ``admin_token`` instead on admin calls (as a POST of their own
when the stream carries the client token; never the peer token); with ``tls_ca_file`` every
node is reached over HTTPS and verified against that CA. A refusal (401 or 403)
surfaces at once as :class:`UnauthorizedError` with the node's message, which
names the token that is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import errno
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

import aiohttp
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_random_exponential,
)

from raftlog.client.errors import (
    ClusterUnavailableError,
    LeaderNotAvailableError,
    NotLeaderError,
    RaftlogError,
    RequestTimeoutError,
    UnauthorizedError,
    UnknownPartitionError,
    UnknownTopicError,
    error_for,
)
from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError
from raftlog.rpc.messages import (
    CLIENT_ROUTES,
    CLIENT_STREAM_PATH,
    STREAM_MAX_REQUEST_BYTES,
    ErrorResponse,
    MetadataRequest,
    MetadataResponse,
    TopicInfo,
)
from raftlog.rpc.parts_payload import PartsPayload
from raftlog.rpc.roles import AUTO_CREATE_ROUTE, ROUTE_ROLES, Role
from raftlog.rpc.transport import (
    AUTH_HEADER,
    FrameStream,
    StreamClosedError,
    StreamPool,
    UnmaskedWebSocket,
    open_frame_stream,
    timed_request,
)

R = TypeVar("R")

CONTENT_TYPE = "application/x-raftlog"

ROUTES = CLIENT_ROUTES


#: Upper bound of the default per-attempt timeout (see the module doc).
MAX_ATTEMPT_TIMEOUT_S = 10.0
#: The least time an attempt is given even when the call's deadline is (nearly) spent.
MIN_ATTEMPT_TIMEOUT_S = 0.05
#: How long a node whose request timed out is tried after the others.
SLOW_NODE_S = 30.0

#: Redirects per call that retry at once (see ``CallState.backoff``).
FREE_REDIRECTS = 3
LEADER_WAIT_S = 1.0
"""How long a node may hold a partition call's metadata refresh while a partition has no
known leader (``MetadataRequest.wait_for_leaders_ms``), at most half the attempt's bound."""
# A partition call backs off at most 0.25 s between attempts: while its leader is
# being elected it must notice the new one within a fraction of the election
# timeout, not sleep through it (the failover benchmark's first ack).
_PARTITION_BACKOFF = wait_random_exponential(multiplier=0.05, max=0.25)
# Any other call backs off up to 1 s.
_BACKOFF = wait_random_exponential(multiplier=0.05, max=1.0)

# The deadline (time.monotonic()) of the outermost client call running in this task;
# nested retry loops (a metadata refresh inside a produce) share it.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "raftlog_client_deadline", default=None
)


def parse_servers(servers: str | list[str]) -> list[str]:
    """``"h:p,h:p"`` or a list -> ``["h:p", ...]``; raises ValueError naming ``servers``.

    A leading ``http://`` or ``https://`` is dropped: TLS is chosen by the CA file.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for raw in items:
        s = raw.strip()
        for prefix in ("http://", "https://"):
            if s.startswith(prefix):
                s = s[len(prefix) :]
        host, sep, port = s.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"servers: expected a comma-separated list of HOST:PORT, got {raw!r}")
        out.append(s)
    if not out:
        raise ValueError("servers: expected at least one HOST:PORT, got none")
    return out


def retriable(exc: BaseException) -> bool:
    """Whether a call retries after ``exc``: the server's answer says so by its code
    (``ErrorCode.retriable``: not leader, no leader, timeout; an unreachable node counts
    as a timeout), and the client's stale metadata is refreshed and retried. Not when
    every known server refused the connection and none ever answered (see the module
    doc)."""
    if isinstance(exc, _NothingListening):
        return False
    return isinstance(exc, StaleMetadata) or (isinstance(exc, RaftlogError) and exc.code.retriable)


class StaleMetadata(RaftlogError):
    """The cached metadata lacked what the call needed (it is dropped): refresh and retry.
    Raised by :meth:`CallRouting.partition_attempt`; never reaches a caller of a call."""


class _ConnectionRefused(ClusterUnavailableError):
    """Internal: nothing listens at the address (ECONNREFUSED); retriable like any
    unreachable node."""


class _StreamRefused(RaftlogError):
    """Internal: the node refused the client stream's handshake; the call goes as a POST."""


class _NothingListening(ClusterUnavailableError):
    """Every known server refused the connection and none ever answered this client:
    not retried (see the module doc). Callers see a ClusterUnavailableError."""


def _is_refused(exc: aiohttp.ClientError) -> bool:
    """True when the connection was refused (not a reset, timeout or DNS failure)."""
    err = getattr(exc, "os_error", None)
    if not isinstance(err, OSError):
        return False
    if isinstance(err, ConnectionRefusedError) or err.errno == errno.ECONNREFUSED:
        return True
    # asyncio joins the failures of a name resolving to several addresses (localhost:
    # ::1 and 127.0.0.1) into one OSError without an errno: refused only if all were.
    text = str(err)
    return (
        err.errno is None
        and text.count("[Errno") == text.count(f"[Errno {errno.ECONNREFUSED}]") > 0
    )


@dataclasses.dataclass(slots=True)
class CallState:
    """What the attempts of one partition call share."""

    refreshed: bool = False  # the topic's metadata was fetched during this call
    redirected: bool = False  # the last attempt's error named a new leader
    free_redirects: int = FREE_REDIRECTS  # redirects left that skip the backoff

    def backoff(self, retry_state: Any) -> float:
        """The pause before the next attempt: none right after an error named a new
        leader (the hint is fresh: go there at once), else the random exponential
        backoff. Free redirects are few, so two stale nodes naming each other cannot
        make a busy loop."""
        if self.redirected and self.free_redirects > 0:
            self.redirected = False
            self.free_redirects -= 1
            return 0.0
        self.redirected = False
        return _PARTITION_BACKOFF(retry_state)


class CallRouting:
    """How every call reaches a node (mixed into :class:`raftlog.client.RaftlogClient`):
    deadlines, retries, leader hints, metadata refresh, the HTTP send."""

    # The client's state, made by RaftlogClient.__init__ (declared here for the type
    # checker: this part and AdminCalls read it).
    _seeds: list[str]
    _auth_token: str | None
    _admin_token: str | None
    _ssl: ssl.SSLContext | None
    _timeout_s: float
    _attempt_timeout_s: float
    _session: aiohttp.ClientSession | None
    _nodes: dict[int, str]
    _topics: dict[str, TopicInfo]
    _controller_leader: int
    _leader_hints: dict[tuple[str, int], int]
    _refreshing: dict[str, asyncio.Future[Any]]
    _answered: bool
    _timed_out: dict[str, float]
    _streams: StreamPool[str]

    if TYPE_CHECKING:
        # RaftlogClient (async_client.py)
        def url(self, address: str, path: str) -> str: ...

    # ------------------------------------------------------------ routing

    @property
    def request_timeout_s(self) -> float:
        return self._timeout_s

    @property
    def attempt_timeout_s(self) -> float:
        return self._attempt_timeout_s

    @contextlib.contextmanager
    def deadline(self) -> Iterator[float]:
        """The call's overall deadline: ``request_timeout_s`` from now, or the enclosing
        call's when this one is nested in it (whichever is sooner)."""
        outer = _DEADLINE.get()
        mine = time.monotonic() + self._timeout_s
        deadline = mine if outer is None else min(outer, mine)
        token = _DEADLINE.set(deadline)
        try:
            yield deadline
        finally:
            _DEADLINE.reset(token)

    async def _retried(
        self, deadline: float, attempt: Callable[[], Awaitable[R]], wait: Any = None
    ) -> R:
        """``attempt()`` until it returns, fails with an error that is not retriable
        (``retriable``), or fails once the call's ``deadline`` has passed; the last
        error is raised. ``wait``: the pause before a retry (random exponential).

        The first attempt runs before tenacity's loop is built: most calls succeed at
        once, and building it (``AsyncRetrying`` and its first iteration) was half of
        the client's CPU per 100-byte produce (``benchmarks small``, 64 clients: 115
        µs per request with it, 58 without). A failed first attempt pauses as
        tenacity would have, then tenacity retries.
        """
        wait = wait or _BACKOFF
        try:
            return await attempt()
        except Exception as exc:
            if not retriable(exc) or time.monotonic() >= deadline:
                raise
        # a wait strategy reads only attempt_number: no Retrying object is needed
        await asyncio.sleep(wait(RetryCallState(None, None, (), {})))  # type: ignore[arg-type]
        retrying = AsyncRetrying(
            stop=lambda _state: time.monotonic() >= deadline,
            wait=wait,
            retry=retry_if_exception(retriable),
            reraise=True,
        )
        async for retry in retrying:
            with retry:
                return await attempt()
        raise AssertionError("unreachable")

    def _attempt_timeout(self) -> float:
        """This attempt's bound: the per-attempt timeout, cut to what is left of the
        call's deadline (at least MIN_ATTEMPT_TIMEOUT_S)."""
        deadline = _DEADLINE.get()
        if deadline is None:
            return self._attempt_timeout_s
        left = deadline - time.monotonic()
        return max(MIN_ATTEMPT_TIMEOUT_S, min(self._attempt_timeout_s, left))

    async def _metadata(
        self, topics: list[str], with_offsets: bool, wait_for_leaders_s: float = 0.0
    ) -> MetadataResponse:
        req = MetadataRequest(topics, with_offsets, int(wait_for_leaders_s * 1000))
        resp = await self._prefer_controller(req, MetadataResponse)
        self._absorb(resp)
        return resp

    def _absorb(self, meta: MetadataResponse) -> None:
        if meta.nodes:
            self._nodes = {n.node_id: n.address for n in meta.nodes}
        self._controller_leader = meta.controller_leader
        for t in meta.topics:
            self._topics[t.name] = t
            for p in t.partitions:
                if p.leader >= 0:
                    self._leader_hints[(t.name, p.partition)] = p.leader

    async def _prefer_controller(self, req: Any, resp_type: type[R]) -> R:
        """Ask the controller leader: it has applied every acknowledged topic change, so
        reads follow writes. A follower's copy of the controller can lag behind a delete
        or create that was just acknowledged (a fresh client asking it would see a
        deleted topic still there), so an unknown leader is looked up first: any node's
        metadata names it. Any node answers only while none is known (an election)."""
        with self.deadline():
            if self._controller_leader not in self._nodes:
                if isinstance(req, MetadataRequest):
                    # The answer to the request itself names the controller leader: no
                    # lookup of every topic first. In a failover every client refreshing
                    # a topic asked that (3,000 partitions' statuses, 60-100 ms of a
                    # node's loop each, beside the node's elections).
                    found = await self._any_call(req, MetadataResponse)
                    self._absorb(found)
                    if (
                        found.controller_leader == found.node_id
                        or found.controller_leader not in self._nodes
                    ):
                        return cast(R, found)
                else:
                    self._absorb(await self._any_call(MetadataRequest([], False), MetadataResponse))
            addr = self._nodes.get(self._controller_leader)
            if addr is not None:
                try:
                    resp = await self.send(addr, req, resp_type)
                except (ClusterUnavailableError, RequestTimeoutError):
                    self._controller_leader = -1
                else:
                    if not (
                        isinstance(resp, MetadataResponse)
                        and resp.controller_leader != resp.node_id
                        and resp.controller_leader in self._nodes
                    ):
                        return resp
                    # the node asked no longer leads the controller: ask the one it names
                    self._controller_leader = resp.controller_leader
                    addr = self._nodes[resp.controller_leader]
                    with contextlib.suppress(ClusterUnavailableError, RequestTimeoutError):
                        return await self.send(addr, req, resp_type)
            return await self._any_call(req, resp_type)

    def _candidates(self) -> list[str]:
        """Every known node and seed in a random order, those that timed out in the last
        ``SLOW_NODE_S`` last (a hung node must not take every attempt's whole bound)."""
        known = list(self._nodes.values())
        seeds = [s for s in self._seeds if s not in known]
        out = known + seeds
        random.shuffle(out)
        now = time.monotonic()
        slow = {a for a, at in self._timed_out.items() if now - at < SLOW_NODE_S}
        return [a for a in out if a not in slow] + [a for a in out if a in slow]

    async def _any_call(self, req: Any, resp_type: type[R]) -> R:
        """Send to any reachable node, trying each before backing off."""

        async def attempt() -> R:
            last: RaftlogError | None = None
            candidates = self._candidates()
            refused = []
            for addr in candidates:
                try:
                    return await self.send(addr, req, resp_type)
                except RequestTimeoutError as exc:  # hung: the next one may answer
                    last = exc
                    self._timed_out[addr] = time.monotonic()
                except ClusterUnavailableError as exc:
                    last = exc
                    if isinstance(exc, _ConnectionRefused):
                        refused.append(addr)
            if refused and len(refused) == len(candidates) and not self._answered:
                raise _NothingListening(
                    f"cannot reach {', '.join(sorted(refused))}: connection refused "
                    "(nothing listens there); check the server addresses (--servers, "
                    "RAFTLOG_SERVERS or the connector's 'servers' option) and that the "
                    "cluster runs (`raftlog local start` starts a local one)"
                )
            raise last or ClusterUnavailableError("no servers configured")

        with self.deadline() as deadline:
            return await self._retried(deadline, attempt)

    async def _controller_call(self, req: Any, resp_type: type[R]) -> R:
        async def attempt() -> R:
            addr = self._nodes.get(self._controller_leader)
            if addr is None:
                await self._metadata([], with_offsets=False)
                addr = self._nodes.get(self._controller_leader)
                if addr is None:
                    raise LeaderNotAvailableError("the controller has no leader yet")
            try:
                return await self.send(addr, req, resp_type)
            except (NotLeaderError, ClusterUnavailableError, RequestTimeoutError) as exc:
                self._controller_leader = getattr(exc, "leader_id", -1)
                raise

        with self.deadline() as deadline:
            return await self._retried(deadline, attempt)

    async def partition_call(self, topic: str, partition: int, req: Any, resp_type: type[R]) -> R:
        """``req`` at the leader of ``topic``/``partition``, answered as ``resp_type``:
        retried (leader changes, timeouts) within the call's deadline; what is not
        retriable is raised as the client's error for its code."""
        state = CallState()
        with self.deadline() as deadline:
            return await self._retried(
                deadline,
                lambda: self.partition_attempt(topic, partition, req, resp_type, state),
                state.backoff,
            )

    async def partition_attempt(
        self, topic: str, partition: int, req: Any, resp_type: type[R], state: CallState
    ) -> R:
        """One attempt of a partition call at the leader as last seen (looked up first when
        unknown). Retriable errors (see ``retriable``) are raised for the caller to retry,
        after the leader hint was updated from them."""
        key = (topic, partition)
        leader = self._leader_hints.get(key, -1)
        if leader < 0 or leader not in self._nodes:
            meta = await self._refresh_topic(topic)
            state.refreshed = True
            info = self._topics.get(topic)
            if info is None:
                if meta.controller_leader != meta.node_id:
                    # No controller leader was known (an election), and the node that
                    # answered may lag a creation just acknowledged (a node restarted
                    # after a crash): not proof the topic is unknown. Retried.
                    raise LeaderNotAvailableError(
                        f"topic {topic!r} is unknown to node {meta.node_id}, which does "
                        "not lead the controller (its copy may lag); asking again"
                    )
                raise UnknownTopicError(f"unknown topic {topic!r}")
            if not 0 <= partition < len(info.partitions):
                raise UnknownPartitionError(
                    f"topic {topic!r} has no partition {partition} "
                    f"(it has partitions 0..{len(info.partitions) - 1})"
                )
            leader = self._leader_hints.get(key, -1)
            if leader < 0 or leader not in self._nodes:
                raise LeaderNotAvailableError(f"partition {topic}/{partition} has no leader yet")
        try:
            return await self.send(self._nodes[leader], req, resp_type)
        except (NotLeaderError, LeaderNotAvailableError) as exc:
            if exc.leader_id >= 0 and exc.leader_id != leader:
                self._leader_hints[key] = exc.leader_id
                state.redirected = True
                if exc.leader_address:
                    self._nodes.setdefault(exc.leader_id, exc.leader_address)
            elif self._leader_hints.get(key) == leader:
                self._leader_hints.pop(key, None)
            raise
        except (ClusterUnavailableError, RequestTimeoutError):
            if self._leader_hints.get(key) == leader:
                self._leader_hints.pop(key, None)
            raise
        except UnknownTopicError:
            # The cache may predate a delete and recreate; check once.
            if state.refreshed:
                raise
            self._topics.pop(topic, None)
            self._leader_hints.pop(key, None)
            state.refreshed = True
            raise StaleMetadata(f"unknown topic {topic!r}") from None

    async def _refresh_topic(self, topic: str) -> MetadataResponse:
        """Refresh ``topic``'s metadata; concurrent callers share one request (and its
        answer, returned)."""
        fut = self._refreshing.get(topic)
        if fut is None or fut.done():
            # The node holds its answer until the partitions have leaders (a new topic's
            # first election), at most half this attempt's bound: the call that needs one
            # goes on the moment it is known, instead of after a backoff.
            wait_s = min(LEADER_WAIT_S, self._attempt_timeout() / 2)
            fut = asyncio.ensure_future(self._metadata([topic], True, wait_s))
            self._refreshing[topic] = fut

            def _forget(f: asyncio.Future[Any], t: str = topic) -> None:
                if self._refreshing.get(t) is f:
                    del self._refreshing[t]

            fut.add_done_callback(_forget)
        return await asyncio.shield(fut)

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=64, limit_per_host=16, ssl=self._ssl if self._ssl else False
                ),
                ws_response_class=UnmaskedWebSocket,
            )
        return self._session

    def _auth_headers(self, route: str | None = None) -> dict[str, str]:
        """The Authorization header of a call of ``route`` (None: the client stream's)."""
        token = self._token_for(route)
        return {AUTH_HEADER: f"Bearer {token}"} if token else {}

    def _token_for(self, route: str | None) -> str | None:
        """The admin token for an admin route (and create_topic, which is one when the
        cluster's auto.create.topics.enable is off) when it is given; else the client
        token; either one when only it is given. None (route): the stream's token."""
        admin = route is not None and (
            route == AUTO_CREATE_ROUTE or ROUTE_ROLES.get(route, Role.ADMIN) is Role.ADMIN
        )
        if admin:
            return self._admin_token or self._auth_token
        return self._auth_token or self._admin_token

    async def send(self, address: str, req: Any, resp_type: type[R]) -> R:
        """One attempt of ``req`` at the node at ``address``: on its client stream when
        small, else (or when the node refuses the stream) as a POST."""
        # A large request (a produce's payload) stays in parts up to the socket: no copy.
        parts = codec.encode_parts(req)
        size = sum(len(p) for p in parts)
        bound = self._attempt_timeout()
        answer: bytes | memoryview | None = None
        status = 200
        route = ROUTES[type(req)]
        # a call whose token is not the stream's (an admin call) goes as a POST of its own
        on_stream = self._token_for(route) == self._token_for(None)
        if on_stream and size <= STREAM_MAX_REQUEST_BYTES:
            answer = await self._stream_call(address, [b"".join(parts)], bound)
        elif on_stream and not self._ssl:
            answer = await self._stream_call(address, parts, bound)
        if answer is None:
            status, answer = await self._post(address, route, parts, bound)
        self._answered = True
        try:
            msg = codec.decode(answer)
        except CodecError as exc:
            if status in (401, 403):
                raise UnauthorizedError(
                    f"{address} refused the request (HTTP {status}): missing or wrong token "
                    "(pass auth_token= for the client token, admin_token= for the admin token)"
                ) from exc
            raise RaftlogError(
                f"{address} answered HTTP {status} with an undecodable body: {exc}; "
                f"{bytes(answer[:200])!r}"
            ) from exc
        if isinstance(msg, ErrorResponse):
            raise error_for(msg.code, msg.message, msg.leader_id, msg.leader_address)
        if not isinstance(msg, resp_type):
            raise RaftlogError(
                f"{address} answered a {type(msg).__name__}, expected a {resp_type.__name__}"
            )
        return msg

    async def _post(
        self, address: str, route: str, parts: list[bytes | memoryview], bound: float
    ) -> tuple[int, bytes]:
        """(HTTP status, body) of ``POST /v1/<route>`` with the body ``b"".join(parts)``."""
        headers = {"Content-Type": CONTENT_TYPE, **self._auth_headers(route)}
        body = PartsPayload(parts)
        timeout = aiohttp.ClientTimeout(total=bound, connect=min(5.0, bound))
        try:
            async with self._http().post(
                self.url(address, f"/v1/{route}"), data=body, headers=headers, timeout=timeout
            ) as resp:
                return resp.status, await resp.read()
        except TimeoutError as exc:
            raise RequestTimeoutError(f"request to {address} timed out after {bound:.3g}s") from exc
        except aiohttp.ClientError as exc:
            raise self._unreachable(address, exc) from exc

    async def _stream_call(
        self, address: str, parts: list[bytes | memoryview], bound: float
    ) -> memoryview | None:
        """The answer to the encoded call ``parts`` (its buffers in order) on ``address``'s
        client stream; None when the node refuses the stream (a wrong token: the POST's
        answer says why)."""
        try:
            return await timed_request(
                lambda: self._streams.get(address, lambda: self._open_stream(address, bound)),
                lambda s: s.request_encoded(*parts),
                bound,
            )
        except _StreamRefused:
            return None
        except TimeoutError as exc:
            raise RequestTimeoutError(f"request to {address} timed out after {bound:.3g}s") from exc
        except StreamClosedError as exc:  # the stream ended with the call in flight
            raise ClusterUnavailableError(f"cannot reach {address}: {exc}") from exc

    async def _open_stream(self, address: str, bound: float) -> FrameStream:
        url = self.url(address, CLIENT_STREAM_PATH).replace("http", "ws", 1)
        try:
            async with asyncio.timeout(min(5.0, bound)):
                return await open_frame_stream(
                    self._http(),
                    url,
                    address,
                    headers=self._auth_headers(),
                    max_msg_size=0,  # answers are the node's (a fetch's can be large)
                )
        except aiohttp.WSServerHandshakeError as exc:
            raise _StreamRefused(f"{address} refused the client stream: HTTP {exc.status}") from exc
        except TimeoutError as exc:
            raise RequestTimeoutError(
                f"connecting to {address} timed out after {min(5.0, bound):.3g}s"
            ) from exc
        except aiohttp.ClientError as exc:
            raise self._unreachable(address, exc) from exc

    def _unreachable(self, address: str, exc: aiohttp.ClientError) -> RaftlogError:
        """The error of a call that could not reach ``address`` (or not over TLS)."""
        if isinstance(exc, aiohttp.ClientSSLError):
            # Not retried: the same handshake fails the same way every time.
            return RaftlogError(_tls_failure(address, exc))
        if _is_refused(exc):
            return _ConnectionRefused(
                f"cannot reach {address}: connection refused (nothing listens there)"
            )
        hint = ""
        if self._ssl is None and isinstance(exc, aiohttp.ServerDisconnectedError):
            hint = (
                " (a node that serves HTTPS drops plain HTTP requests: give the client "
                "the cluster's CA, tls_ca_file / --tls-ca / tlsCaFile)"
            )
        return ClusterUnavailableError(f"cannot reach {address}: {exc}{hint}")


def _tls_failure(address: str, exc: aiohttp.ClientSSLError) -> str:
    """Why a TLS handshake with ``address`` failed, and what to check."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return (
            f"TLS to {address} failed: {exc.certificate_error}; the node's certificate must be "
            f"signed by the CA given as tls_ca_file (--tls-ca, RAFTLOG_TLS_CA, tlsCaFile) and "
            f"name the host {address.rpartition(':')[0]}"
        )
    return (
        f"TLS to {address} failed: {exc}; does the node serve TLS (--tls-cert)? "
        "For a node without it, leave tls_ca_file out"
    )
