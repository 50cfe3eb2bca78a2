"""Serving the console: ``GET /console`` on a node (``--console``) or on its own
(``raftlog console``).

The page is rendered on the server for each request from the current
:class:`~raftlog.console.view.ConsoleSource` view and refreshes itself every
``refresh_s`` seconds. It is read-only: the page has no form and no other route.
It needs the client role (:data:`raftlog.rpc.roles.PAGE_ROLES`) as the node's other
routes do (:func:`raftlog.rpc.server.auth_middleware`); a browser gives the client
token as the password of HTTP Basic authentication. ``raftlog console`` serves on
loopback, or, with ``--tls-cert`` and ``--tls-key``, over HTTPS on any address.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web

from raftlog.console.page import PAGE, TEMPLATE
from raftlog.console.view import ConsoleSource
from raftlog.health import format_bytes

CONSOLE_PATH = "/console"
DEFAULT_LISTEN = "127.0.0.1:9650"
DEFAULT_REFRESH_S = 2
_SOURCE = web.AppKey("raftlog_console_source", ConsoleSource)


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) + f".{int(ms) % 1000:03d}"


def add_console_routes(
    app: web.Application, source: ConsoleSource, refresh_s: int = DEFAULT_REFRESH_S
) -> None:
    """Serve the console at ``/console`` in ``app`` (whose middleware checks roles);
    ``source`` is closed with the app."""
    aiohttp_jinja2.setup(
        app,
        loader=jinja2.DictLoader({PAGE: TEMPLATE}),
        autoescape=True,
        filters={"bytes": lambda n: format_bytes(int(n)), "clock": _clock},
    )
    app[_SOURCE] = source

    async def page(request: web.Request) -> web.Response:
        view = await request.app[_SOURCE].view()
        response = aiohttp_jinja2.render_template(
            PAGE, request, {"view": view, "refresh_s": refresh_s}
        )
        response.headers["Cache-Control"] = "no-store"
        return response

    async def close(app: web.Application) -> None:
        await app[_SOURCE].close()

    app.router.add_get(CONSOLE_PATH, page)
    app.on_cleanup.append(close)


def add_console_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help=f"HOST:PORT to serve the page on (default {DEFAULT_LISTEN}); a host other "
        "than loopback needs --tls-cert and --tls-key",
    )
    p.add_argument("--tls-cert", help="PEM certificate: serve the page over HTTPS")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument(
        "--refresh",
        type=int,
        default=DEFAULT_REFRESH_S,
        metavar="SECONDS",
        help=f"how often the page reloads itself (default {DEFAULT_REFRESH_S})",
    )


def run_console(
    args: argparse.Namespace, servers: list[str], token: str | None, ca_file: str | None
) -> int:
    """Serve the console of the cluster at ``servers`` until interrupted. The browser
    must send the same client token the console uses (when there is one)."""
    import ssl

    from raftlog.node.config import host_port, is_loopback
    from raftlog.rpc.server import AuthPolicy, auth_middleware

    host, port = host_port(args.listen, "--listen")
    if not 1 <= args.refresh <= 3600:
        raise ValueError(f"--refresh: expected 1..3600 seconds, got {args.refresh}")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValueError("--tls-cert and --tls-key: give both or neither")
    tls: ssl.SSLContext | None = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    elif not is_loopback(host):
        raise ValueError(
            f"--listen: {host} is not loopback; serving the console there needs "
            "--tls-cert and --tls-key (the browser sends the client token)"
        )
    policy = AuthPolicy(client_token=token, open_status=False)
    app = web.Application(middlewares=[auth_middleware(policy)])
    add_console_routes(app, ConsoleSource(servers, token, ca_file), args.refresh)

    async def root(request: web.Request) -> web.Response:
        raise web.HTTPFound(CONSOLE_PATH)

    app.router.add_get("/", root)

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port, ssl_context=tls)
            await site.start()
            bound = runner.addresses[0]
            scheme = "https" if tls else "http"
            print(
                f"raftlog console: {scheme}://{host}:{bound[1]}{CONSOLE_PATH} "
                f"(cluster {','.join(servers)}; Ctrl-C stops it)",
                flush=True,
            )
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError):
                    loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(serve())
    return 0


def serve_on_node(app: web.Application, servers: list[str], token: str | None, ca: Any) -> None:
    """A node's ``/console`` (``--console``): the page of the node's own cluster, read
    with the node's client token and CA."""
    add_console_routes(app, ConsoleSource(servers, token, ca))
