"""Reaching the raftlog cluster: resolving servers and opening clients.

The connector speaks only ``raftlog.client``. It is imported lazily, inside
these functions, because they run in Spark's Python workers: an import error
there then surfaces with its own message in the failed task instead of
breaking Spark's discovery of the ``pyspark_raftlog`` data source.

Where the cluster is (see :mod:`pyspark_raftlog.options`): option ``servers``,
else ``RAFTLOG_SERVERS``, else the embedded local cluster; how to reach it:
the auth token (``authToken``, else ``RAFTLOG_AUTH_TOKEN``) and the CA file
that turns on TLS (``tlsCaFile``, else ``RAFTLOG_TLS_CA``). Spark confs
(``spark.raftlog.*``) cannot be a source: the data source's methods run in
Python planner workers that Spark starts with the options only, without a
session (``SparkSession.getActiveSession()`` is None there, checked on Spark
4.3), so a cluster is configured once for all queries through the driver's
environment, which those workers inherit. For the latter the
driver calls ``raftlog.cluster.start_cluster()`` once per plan: it starts the
cluster in ``$RAFTLOG_HOME`` (default ``~/.raftlog/local``), or restarts any of
its nodes that is not running, and returns once a majority serves. Concurrent
callers (two queries, two Spark applications) serialize on a file lock in that
directory, so only one of them spawns nodes. Starting anything is logged as one
warning line that says where the data lives; a node that cannot start is
logged with the end of its log, and the query goes on while a majority runs.

The resolved addresses travel to the workers inside the pickled writer or
input partitions, together with the auth token and the CA file's path
(:class:`ClusterServers`), so executors never race to start the cluster and
need no environment of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raftlog.client import BlockingRaftlogClient, RaftlogClient

__all__ = [
    "ClusterServers",
    "client_errors",
    "open_async_client",
    "open_blocking_client",
    "resolve_cluster",
    "resolve_servers",
]

log = logging.getLogger("pyspark_raftlog")


class ClusterServers(list[str]):
    """Server addresses, the auth token to send them (None: no auth) and the CA file
    to verify them with (None: plain HTTP).

    A list, so that code holding "the servers" keeps working; the token and the
    CA path ride along when Spark pickles the object to executors. ``repr`` hides
    the token.
    """

    def __init__(
        self,
        servers: Iterable[str],
        auth_token: str | None = None,
        tls_ca_file: str | None = None,
    ) -> None:
        super().__init__(servers)
        self.auth_token = auth_token
        self.tls_ca_file = tls_ca_file

    def __repr__(self) -> str:
        token = ", auth_token=<hidden>" if self.auth_token else ""
        tls = f", tls_ca_file={self.tls_ca_file!r}" if self.tls_ca_file else ""
        return f"ClusterServers({list(self)!r}{token}{tls})"


def resolve_cluster(opts: Any) -> ClusterServers:
    """:func:`resolve_servers` for parsed Sink/SourceOptions (their servers, token, CA)."""
    return resolve_servers(opts.servers, opts.auth_token, opts.tls_ca_file)


def resolve_servers(
    servers: Sequence[str] | None,
    auth_token: str | None = None,
    tls_ca_file: str | None = None,
) -> ClusterServers:
    """The addresses to connect to: ``servers`` as given, or the embedded local cluster's.

    ``auth_token`` (the parsed ``authToken`` option or ``RAFTLOG_AUTH_TOKEN``) and
    ``tls_ca_file`` (``tlsCaFile`` or ``RAFTLOG_TLS_CA``) go with them; for the
    embedded cluster, its own recorded token and CA are the defaults.
    Starting the local cluster may take a few seconds the first time; it is left
    running (detached) for later queries, as ``raftlog local start`` does. Raises
    RuntimeError naming the failed nodes and their log lines when it cannot serve.
    """
    if servers:
        return ClusterServers(servers, auth_token, tls_ca_file)
    try:
        from raftlog.cluster import ClusterError, start_cluster
    except ImportError as exc:  # the engine is missing or broken: say which import failed
        raise RuntimeError(
            "option 'servers' is not set, so the embedded local raftlog cluster is needed, "
            f"but raftlog.cluster cannot be imported: {exc}"
        ) from exc
    try:
        cluster = start_cluster()
    except ClusterError as exc:
        raise RuntimeError(
            "option 'servers' is not set (nor RAFTLOG_SERVERS), so the embedded local raftlog "
            f"cluster is used, and it cannot serve: {exc}"
        ) from exc
    if cluster.started:
        what = (
            "started the embedded local raftlog cluster"
            if len(cluster.started) == len(cluster.nodes)
            else "restarted node(s) "
            + ",".join(map(str, cluster.started))
            + " of the embedded local raftlog cluster"
        )
        log.warning(
            "raftlog: option 'servers' is not set (nor RAFTLOG_SERVERS): %s at %s; "
            "its data lives in %s (stop it with `raftlog local stop`)",
            what,
            ",".join(cluster.servers),
            cluster.data_dir,
        )
    else:
        log.debug("raftlog: using the embedded local raftlog cluster in %s", cluster.data_dir)
    for failure in cluster.down:
        log.warning(
            "raftlog: the embedded local cluster serves with %d of %d nodes; %s",
            len(cluster.nodes) - len(cluster.down),
            len(cluster.nodes),
            failure.describe(),
        )
    return ClusterServers(
        cluster.servers,
        auth_token or cluster.auth_token,
        tls_ca_file or cluster.tls_ca_file,
    )


def _token(servers: Sequence[str], auth_token: str | None) -> str | None:
    return auth_token if auth_token is not None else getattr(servers, "auth_token", None)


def open_blocking_client(
    servers: Sequence[str], request_timeout_s: float, auth_token: str | None = None
) -> BlockingRaftlogClient:
    """A blocking client (driver-side planning calls); the caller closes it.

    ``auth_token`` defaults to the one carried by ``servers`` (:class:`ClusterServers`),
    and so does the CA file.
    """
    from raftlog.client import BlockingRaftlogClient

    return BlockingRaftlogClient(
        list(servers),
        auth_token=_token(servers, auth_token),
        tls_ca_file=getattr(servers, "tls_ca_file", None),
        request_timeout_s=request_timeout_s,
    )


def open_async_client(
    servers: Sequence[str], request_timeout_s: float, auth_token: str | None = None
) -> RaftlogClient:
    """An async client for use inside one event loop; the caller awaits ``close()``.

    ``auth_token`` defaults to the one carried by ``servers`` (:class:`ClusterServers`),
    and so does the CA file.
    """
    from raftlog.client import RaftlogClient

    return RaftlogClient(
        list(servers),
        auth_token=_token(servers, auth_token),
        tls_ca_file=getattr(servers, "tls_ca_file", None),
        request_timeout_s=request_timeout_s,
    )


def client_errors() -> Any:
    """The ``raftlog.client`` module, for its error classes (imported lazily, as above)."""
    import raftlog.client

    return raftlog.client
