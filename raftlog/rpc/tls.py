"""TLS for every connection: the node's server side, its peer connections, clients.

One CA file is the trust root of a cluster. A node serves HTTPS with its
certificate and key (``--tls-cert``/``--tls-key``) and verifies every peer it
connects to against the CA (``--tls-ca``), host name included (a node's
certificate must name its advertised host, as a DNS name or an IP address).
Clients need only the CA file (``tls_ca_file``, the CLI's ``--tls-ca`` or
``$RAFTLOG_TLS_CA``, the connector's ``tlsCaFile``).

TLS is not mutual: nodes do not ask for client certificates. Peers and
clients share one port, and a Spark executor should need no key of its own;
who may call what is decided by one check, the bearer token (a peer token for
``/raft/*``, a client token for ``/v1/*``, see :mod:`raftlog.rpc.server`), which
TLS keeps secret on the wire.

Every file is checked when the context is built: a missing, unreadable or
malformed file raises :class:`TlsConfigError` naming the flag or option and
what was expected, so a bad path fails at start-up, not on the first request.
"""

from __future__ import annotations

import dataclasses
import os
import ssl


class TlsConfigError(ValueError):
    """A TLS file is missing or unusable; the message names the flag or option."""


@dataclasses.dataclass(frozen=True, slots=True)
class TlsFiles:
    """A node's TLS files: its certificate chain and key (PEM), and the cluster's CA (PEM)."""

    cert_file: str
    key_file: str
    ca_file: str


def _readable(path: str, what: str) -> str:
    if not path:
        raise TlsConfigError(f"{what}: expected the path of a PEM file, got an empty value")
    if not os.path.isfile(path):
        raise TlsConfigError(f"{what}: expected the path of a PEM file; {path!r} does not exist")
    if not os.access(path, os.R_OK):
        raise TlsConfigError(f"{what}: {path!r} is not readable by this process")
    return path


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """The context a node serves HTTPS with (TLS 1.2 or newer, no client certificates)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    cert = _readable(files.cert_file, "--tls-cert")
    key = _readable(files.key_file, "--tls-key")
    try:
        ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(
            f"--tls-cert/--tls-key: expected a PEM certificate chain ({cert}) and its "
            f"matching PEM private key ({key}): {exc}"
        ) from exc
    return ctx


def client_context(ca_file: str, what: str = "--tls-ca") -> ssl.SSLContext:
    """The context that verifies a server (node or peer) against ``ca_file``.

    ``what`` names the flag or option the path came from, for the error.
    """
    path = _readable(ca_file, what)
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=path)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(
            f"{what}: expected a PEM CA certificate, {path!r} is not: {exc}"
        ) from exc
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def scheme(ctx: ssl.SSLContext | None) -> str:
    """``https`` with a TLS context, else ``http``."""
    return "https" if ctx is not None else "http"
