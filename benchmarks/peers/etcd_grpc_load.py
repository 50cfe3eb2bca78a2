"""The ``small`` workload against etcd's own gRPC API (``KV.Put``), with the asyncio
client ``aetcd`` (grpc.aio), beside the JSON gateway's rows (:mod:`etcd_load`).

The gateway is an HTTP -> gRPC hop inside etcd; this load skips it, so the
``peers`` scenario can divide our figures by the faster of the two. Same closed-loop
generator and the same request: one 100-byte value per put, a distinct key each.
Workers are spread round-robin over the members, one gRPC channel per member
(HTTP/2 multiplexes every worker's calls on it, as etcd's ``benchmark put`` does
with its default one connection per endpoint); a follower forwards the proposal.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from benchmarks.peers.detect import AETCD_INSTALL_HINT
from benchmarks.workloads.closed_loop import LoadResult, run_closed_loop

REQUEST_TIMEOUT_S = 10


class EtcdGrpcPutError(RuntimeError):
    """etcd answered a put without a response header (no revision)."""


def host_port(client_url: str) -> tuple[str, int]:
    """``("127.0.0.1", 2379)`` from ``"http://127.0.0.1:2379"``; ValueError naming the URL."""
    parts = urlsplit(client_url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ValueError(f"client_urls: expected http://HOST:PORT, got {client_url!r}")
    return parts.hostname, parts.port


async def etcd_grpc_put_load(
    client_urls: list[str],
    clients: int,
    duration_s: float,
    max_requests: int,
    value_size: int = 100,
) -> LoadResult:
    """Closed-loop gRPC puts of ``value_size``-byte values, one per request, distinct keys.

    Raises RuntimeError with the install command when ``aetcd`` is missing.
    """
    if not client_urls:
        raise ValueError("client_urls: expected at least one etcd client URL")
    endpoints = [host_port(url) for url in client_urls]
    try:
        import aetcd
    except ImportError as exc:
        raise RuntimeError(AETCD_INSTALL_HINT) from exc
    value = os.urandom(value_size)
    channels = [aetcd.Client(host, port, timeout=REQUEST_TIMEOUT_S) for host, port in endpoints]
    try:
        for channel in channels:
            await channel.connect()

        async def put(worker: int, n: int) -> None:
            answer = await channels[worker % len(channels)].put(f"bench/{n:012d}".encode(), value)
            if answer.header is None or answer.header.revision <= 0:
                raise EtcdGrpcPutError(f"put {n} answered without a revision: {answer!r}")

        return await run_closed_loop(put, clients, duration_s, max_requests)
    finally:
        for channel in channels:
            await channel.close()
