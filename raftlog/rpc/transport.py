"""The aiohttp peer transport: raft's ``Transport`` between node processes.

One long-lived ``ClientSession`` per peer keeps a small pool of keep-alive
connections, so several requests (append_entries pipelining, recovery,
heartbeats, votes) are in flight to one follower at once. Every failure —
refused connection, reset, timeout, non-200 reply, undecodable body — becomes
a :class:`raftlog.raft.errors.TransportError`; raft treats it as a lost
message. No retries here: raft's own timers resend.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from raftlog.raft.errors import TransportError
from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError
from raftlog.rpc.peer import PEER_ROUTES, REPLY_TYPES

AUTH_HEADER = "Authorization"
CONTENT_TYPE = "application/x-raftlog"
CONNECTIONS_PER_PEER = 8


class HttpTransport:
    """Sends raft requests to peers by node id and returns their replies."""

    def __init__(
        self,
        node_id: int,
        peers: dict[int, str],
        *,
        auth_token: str | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self.node_id = node_id
        self._peers = dict(peers)
        self._auth = {AUTH_HEADER: f"Bearer {auth_token}"} if auth_token else {}
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

    async def send(self, target_node: int, message: Any) -> Any:
        """POST ``message`` to ``target_node``; return its reply or raise TransportError."""
        if self._closed:
            raise TransportError("transport is closed")
        address = self._peers.get(target_node)
        if address is None:
            raise TransportError(f"unknown peer node {target_node}")
        route = PEER_ROUTES.get(type(message))
        if route is None:
            raise TransportError(f"{type(message).__name__} is not a peer request")
        url = f"http://{address}/raft/{route}"
        try:
            body = codec.encode(message)
            async with self._session(target_node).post(url, data=body) as resp:
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
