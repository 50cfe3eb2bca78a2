"""The ``small`` workload against etcd: one 100-byte put per request through the JSON
gRPC gateway (``POST /v3/kv/put``, base64 key and value), with aiohttp.

Workers are spread round-robin over the members, as etcd's own ``benchmark put``
spreads its clients over ``--endpoints``; a member that is not the leader
forwards the proposal, as it would for any etcd client. Each worker has its own
connection (a connector without a per-host cap below the worker count), so
concurrency is what the caller asked for and not the pool size.
"""

from __future__ import annotations

import base64
import os

import aiohttp

from benchmarks.workloads.closed_loop import LoadResult, run_closed_loop

REQUEST_TIMEOUT_S = 10.0


class EtcdPutError(RuntimeError):
    """etcd answered a put with something other than HTTP 200 and a header."""


async def etcd_put_load(
    client_urls: list[str],
    clients: int,
    duration_s: float,
    max_requests: int,
    value_size: int = 100,
) -> LoadResult:
    """Closed-loop puts of ``value_size``-byte values, one per request, distinct keys."""
    if not client_urls:
        raise ValueError("client_urls: expected at least one etcd client URL")
    value = base64.b64encode(os.urandom(value_size)).decode()
    connector = aiohttp.TCPConnector(limit=clients + 8, limit_per_host=clients + 8)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def put(worker: int, n: int) -> None:
            url = f"{client_urls[worker % len(client_urls)]}/v3/kv/put"
            key = base64.b64encode(f"bench/{n:012d}".encode()).decode()
            async with session.post(url, json={"key": key, "value": value}) as resp:
                body = await resp.json(content_type=None)
                if resp.status != 200 or "header" not in body:
                    raise EtcdPutError(f"put to {url} answered HTTP {resp.status}: {body}")

        return await run_closed_loop(put, clients, duration_s, max_requests)
