"""Reaching the raftlog cluster: resolving servers and opening clients.

The connector speaks only ``raftlog.client``. It is imported lazily, inside
these functions, because they run in Spark's Python workers: an import error
there then surfaces with its own message in the failed task instead of
breaking Spark's discovery of the ``pyspark_raftlog`` data source.

Without a ``servers`` option the embedded local cluster is used: the driver
calls ``raftlog.cluster.ensure_local_cluster()`` (race-safe start-if-needed)
once, and the resolved addresses travel to the workers inside the pickled
writer or input partitions, so executors never race to start it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raftlog.client import BlockingRaftlogClient, RaftlogClient

__all__ = ["client_errors", "open_async_client", "open_blocking_client", "resolve_servers"]


def resolve_servers(servers: Sequence[str] | None) -> list[str]:
    """The addresses to connect to: ``servers`` as given, or the embedded local cluster's.

    Starting the local cluster may take a few seconds the first time; it is
    left running (detached) for later queries, as ``raftlog local start`` does.
    """
    if servers:
        return list(servers)
    try:
        from raftlog.cluster import ensure_local_cluster
    except ImportError as exc:  # the engine is missing or broken: say which import failed
        raise RuntimeError(
            "option 'servers' is not set, so the embedded local raftlog cluster is needed, "
            f"but raftlog.cluster cannot be imported: {exc}"
        ) from exc
    return list(ensure_local_cluster())


def open_blocking_client(servers: Sequence[str], request_timeout_s: float) -> BlockingRaftlogClient:
    """A blocking client (driver-side planning calls); the caller closes it."""
    from raftlog.client import BlockingRaftlogClient

    return BlockingRaftlogClient(list(servers), request_timeout_s=request_timeout_s)


def open_async_client(servers: Sequence[str], request_timeout_s: float) -> RaftlogClient:
    """An async client for use inside one event loop; the caller awaits ``close()``."""
    from raftlog.client import RaftlogClient

    return RaftlogClient(list(servers), request_timeout_s=request_timeout_s)


def client_errors() -> Any:
    """The ``raftlog.client`` module, for its error classes (imported lazily, as above)."""
    import raftlog.client

    return raftlog.client
