"""A 3-node cluster as if on three hosts, with TLS and auth on (issue 17, items 5 and 7).

Each node listens on its own loopback address (127.0.0.2, .3, .4: loopback, so
the test binds nothing reachable from outside, but not ``127.0.0.1``, so every
node is held to a networked node's rules). Certificates come from ``trustme``:
one CA, and one server certificate naming the three addresses as IP SANs.
Clients use ``CLIENT_TOKEN``, admins ``ADMIN_TOKEN``, the nodes ``PEER_TOKEN``
(the three roles of issue 44). The nodes are started
with :func:`raftlog.cluster.start_cluster` and stopped by PID when the
context exits, even when the test failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import signal
from collections.abc import Iterator

HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
CLIENT_TOKEN = "client-secret-token-17"
PEER_TOKEN = "peer-secret-token-17"
ADMIN_TOKEN = "admin-secret-token-44"
INSTALL = "pip install -e '.[test]' (trustme makes the test certificates)"


@dataclasses.dataclass(frozen=True)
class SecureCluster:
    servers: list[str]
    ca_file: str
    pids: list[int]
    data_dir: str


def make_certificates(directory: pathlib.Path, hosts: list[str]) -> tuple[str, str, str]:
    """(cert file, key file, CA file), PEM, for a server certificate naming ``hosts``."""
    try:
        import trustme
    except ImportError as exc:  # fail, never skip, with the command that fixes it
        raise RuntimeError(f"trustme is missing: {INSTALL}") from exc
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert(*hosts)
    paths = [directory / name for name in ("node.pem", "node.key", "ca.pem")]
    paths[0].write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(paths[1]))
    ca.cert_pem.write_to_path(str(paths[2]))
    return str(paths[0]), str(paths[1]), str(paths[2])


@contextlib.contextmanager
def running_secure_cluster(root: pathlib.Path) -> Iterator[SecureCluster]:
    """Start the cluster in ``root``; stop every node by PID on exit."""
    from raftlog.cluster import pid_alive, start_cluster, stop_cluster, stop_node

    tls = make_certificates(root / "tls", HOSTS)
    cluster = start_cluster(
        root / "cluster",
        len(HOSTS),
        hosts=HOSTS,
        auth_token=CLIENT_TOKEN,
        peer_token=PEER_TOKEN,
        admin_token=ADMIN_TOKEN,
        tls=tls,
        timeout_s=90.0,
    )
    try:
        yield SecureCluster(
            cluster.servers, tls[2], [n.pid for n in cluster.nodes], cluster.data_dir
        )
    finally:
        stop_cluster(cluster.data_dir, timeout_s=10.0)
        for node in cluster.nodes:
            if pid_alive(node.pid):
                stop_node(node, signal.SIGKILL, timeout_s=5.0)
