"""The aiohttp peer transport: raft's ``Transport`` between node processes.

One long-lived ``ClientSession`` per peer keeps a small pool of keep-alive
connections, so several requests (append_entries pipelining, recovery,
heartbeats, votes) are in flight to one follower at once. Every failure —
refused connection, reset, timeout, non-200 reply, undecodable body — becomes
a :class:`raftlog.raft.errors.TransportError`; raft treats it as a lost
message. No retries here: raft's own timers resend.

With a TLS context (:func:`raftlog.rpc.tls.client_context` of the cluster's
CA) every peer is reached over HTTPS and its certificate is verified against
the CA for the peer's advertised host, also when its traffic is routed
elsewhere (a proxy per link): the name checked is the node's, not the route's.
Requests carry the peer token, never the client token.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import aiohttp

from raftlog.raft.errors import TransportError
from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError
from raftlog.rpc.peer import PEER_ROUTES, REPLY_TYPES
from raftlog.rpc.tls import scheme

AUTH_HEADER = "Authorization"
CONTENT_TYPE = "application/x-raftlog"
CONNECTIONS_PER_PEER = 8


class HttpTransport:
    """Sends raft requests to peers by node id and returns their replies.

    ``peers`` maps a node id to its advertised address; ``routes`` (optional) to
    where its traffic goes instead. ``peer_token`` is sent with every request;
    ``ssl_context`` (None: plain HTTP) verifies each peer for its advertised host.
    """

    def __init__(
        self,
        node_id: int,
        peers: dict[int, str],
        *,
        routes: dict[int, str] | None = None,
        peer_token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self.node_id = node_id
        self._peers = dict(peers)
        self._routes = dict(routes or {})
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else False
        self._scheme = scheme(ssl_context)
        self._auth = {AUTH_HEADER: f"Bearer {peer_token}"} if peer_token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=min(1.0, timeout_s))
        self._sessions: dict[int, aiohttp.ClientSession] = {}
        self._closed = False

    def _session(self, target: int) -> aiohttp.ClientSession:
        s = self._sessions.get(target)
        if s is None or s.closed:
            s = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=CONNECTIONS_PER_PEER, keepalive_timeout=60, enable_cleanup_closed=True
                ),
                timeout=self._timeout,
                headers={"Content-Type": CONTENT_TYPE, **self._auth},
            )
            self._sessions[target] = s
        return s

    def add_peer(self, node_id: int, address: str) -> None:
        """Reach ``node_id`` at ``address`` from now on (a node that joined the running
        cluster, learnt from the controller); a new address drops the old connections."""
        if self._peers.get(node_id) == address:
            return
        self._peers[node_id] = address
        stale = self._sessions.pop(node_id, None)
        if stale is not None and not stale.closed:
            # closed in the background: the caller is the controller's listener (sync)
            asyncio.get_running_loop().create_task(stale.close())

    async def send(self, target_node: int, message: Any) -> Any:
        """POST ``message`` to ``target_node``; return its reply or raise TransportError."""
        if self._closed:
            raise TransportError("transport is closed")
        advertised = self._peers.get(target_node)
        if advertised is None:
            raise TransportError(f"unknown peer node {target_node}")
        address = self._routes.get(target_node, advertised)
        route = PEER_ROUTES.get(type(message))
        if route is None:
            raise TransportError(f"{type(message).__name__} is not a peer request")
        url = f"{self._scheme}://{address}/raft/{route}"
        tls: dict[str, Any] = {"ssl": self._ssl}
        if self._ssl is not False and address != advertised:
            tls["server_hostname"] = _host(advertised)
        try:
            body = codec.encode(message)
            async with self._session(target_node).post(url, data=body, **tls) as resp:
                data = await resp.read()
                if resp.status != 200:
                    raise TransportError(
                        f"node {target_node} ({address}) answered HTTP {resp.status} to {route}: "
                        f"{data[:300].decode('utf-8', 'replace')}"
                    )
            return codec.decode(data, REPLY_TYPES[type(message)])
        except TransportError:
            raise
        except TimeoutError as exc:
            raise TransportError(f"{route} to node {target_node} ({address}) timed out") from exc
        except aiohttp.ClientError as exc:
            raise TransportError(f"{route} to node {target_node} ({address}): {exc}") from exc
        except CodecError as exc:
            raise TransportError(f"bad reply from node {target_node} to {route}: {exc}") from exc

    async def close(self) -> None:
        self._closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        for s in sessions:
            await s.close()


def _host(address: str) -> str:
    """``HOST`` of ``HOST:PORT`` (brackets of an IPv6 literal removed)."""
    return address.rpartition(":")[0].strip("[]")
