"""Run TCP proxies in their own process, controlled over HTTP (aiohttp).

::

    python -m raftlog.faults.proxy_control --link n1=127.0.0.1:9001 --link n2=127.0.0.1:9002 \
        [--listen-host 127.0.0.1] [--control-port 0]

Each ``--link NAME=HOST:PORT`` gets a :class:`TcpProxy` on an ephemeral
127.0.0.1 port. (``--target HOST:PORT [--listen 127.0.0.1:PORT]`` is the
one-link shorthand; its name is ``link``.) Once everything is bound, one JSON
line goes to stdout, and nothing else ever does::

    {"pid": 1234, "control": 40001, "links": {"n1": 40002, "n2": 40003}}

Control API (on 127.0.0.1:``control``); ``link=NAME`` selects one link,
without it the action applies to every link:

- ``POST /cut[?link=NAME][&blackhole=1]``
- ``POST /heal[?link=NAME]``
- ``POST /delay?s=SECONDS[&link=NAME]``
- ``POST /drop-responses[?link=NAME]``
- ``GET /status``: ``{"links": {name: status}}``

Bad parameters get a 400 whose text names the parameter. SIGTERM or SIGINT
stops the proxies and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence

from aiohttp import web

from raftlog.faults.proxy import TcpProxy, check_loopback


def parse_host_port(text: str, field: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ValueError names ``field`` and the expected form."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{field} must be HOST:PORT with PORT in 0..65535, got {text!r}")
    return host, int(port)


def build_app(proxies: dict[str, TcpProxy]) -> web.Application:
    """The control API over ``proxies`` (see the module docstring)."""

    def selected(request: web.Request) -> list[TcpProxy]:
        name = request.query.get("link")
        if name is None:
            return list(proxies.values())
        if name not in proxies:
            raise web.HTTPBadRequest(
                text=f"link: unknown link {name!r}; known links: {sorted(proxies)}"
            )
        return [proxies[name]]

    def status() -> web.Response:
        return web.json_response({"links": {n: p.status() for n, p in proxies.items()}})

    async def cut(request: web.Request) -> web.Response:
        flag = request.query.get("blackhole", "0")
        if flag not in ("0", "1", "true", "false"):
            raise web.HTTPBadRequest(text=f"blackhole: expected 0 or 1, got {flag!r}")
        for proxy in selected(request):
            proxy.cut(blackhole=flag in ("1", "true"))
        return status()

    async def heal(request: web.Request) -> web.Response:
        for proxy in selected(request):
            proxy.heal()
        return status()

    async def drop_responses(request: web.Request) -> web.Response:
        for proxy in selected(request):
            proxy.drop_responses()
        return status()

    async def delay(request: web.Request) -> web.Response:
        raw = request.query.get("s")
        try:
            seconds = float(raw) if raw is not None else None
        except ValueError:
            seconds = None
        if seconds is None or not 0 <= seconds <= 60:
            raise web.HTTPBadRequest(text=f"s: expected seconds in [0, 60], got {raw!r}")
        for proxy in selected(request):
            proxy.delay(seconds)
        return status()

    async def get_status(_request: web.Request) -> web.Response:
        return status()

    app = web.Application()
    app.router.add_post("/cut", cut)
    app.router.add_post("/heal", heal)
    app.router.add_post("/drop-responses", drop_responses)
    app.router.add_post("/delay", delay)
    app.router.add_get("/status", get_status)
    return app


async def serve(
    links: dict[str, tuple[str, int]], listen_host: str, control_port: int, listen_port: int = 0
) -> None:
    """Start the proxies and the control API, print the ready line, run until SIGTERM/SIGINT."""
    proxies = {
        name: TcpProxy(
            host, port, listen_host=listen_host, listen_port=listen_port if len(links) == 1 else 0,
            name=name,
        )
        for name, (host, port) in links.items()
    }  # fmt: skip
    runner = web.AppRunner(build_app(proxies), access_log=None)
    await runner.setup()
    try:
        for proxy in proxies.values():
            await proxy.start()
        site = web.TCPSite(runner, listen_host, control_port)
        await site.start()
        bound = runner.addresses[0][1]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        ready = {
            "pid": os.getpid(),
            "control": bound,
            "links": {n: p.port for n, p in proxies.items()},
        }
        sys.stdout.write(json.dumps(ready) + "\n")
        sys.stdout.flush()
        await stop.wait()
    finally:
        for proxy in proxies.values():
            await proxy.stop()
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m raftlog.faults.proxy_control", description=__doc__
    )
    parser.add_argument("--link", action="append", default=[], metavar="NAME=HOST:PORT")
    parser.add_argument("--target", metavar="HOST:PORT", help="one-link shorthand")
    parser.add_argument("--listen", metavar="127.0.0.1:PORT", help="with --target")
    parser.add_argument("--listen-host", default="127.0.0.1")
    parser.add_argument("--control-port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        links: dict[str, tuple[str, int]] = {}
        listen_host, listen_port = args.listen_host, 0
        if args.target is not None:
            links["link"] = parse_host_port(args.target, "--target")
        if args.listen is not None:
            if args.target is None:
                raise ValueError("--listen goes with --target (use --listen-host with --link)")
            listen_host, listen_port = parse_host_port(args.listen, "--listen")
        for spec in args.link:
            name, eq, target = spec.partition("=")
            if not eq or not name:
                raise ValueError(f"--link must be NAME=HOST:PORT, got {spec!r}")
            if name in links:
                raise ValueError(f"--link: name {name!r} is given twice")
            links[name] = parse_host_port(target, f"--link {name}")
        if not links:
            raise ValueError("give at least one --link NAME=HOST:PORT or --target HOST:PORT")
        check_loopback(listen_host, "--listen-host")
        if not 0 <= args.control_port < 65536:
            raise ValueError(f"--control-port must be in 0..65535, got {args.control_port}")
    except ValueError as exc:
        parser.error(str(exc))
    asyncio.run(serve(links, listen_host, args.control_port, listen_port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
