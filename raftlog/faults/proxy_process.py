"""Launch ``python -m raftlog.faults.proxy_control`` as a child process and drive its control API.

For integration tests that route node-to-node traffic through proxies in
another process (so a SIGSTOPped or killed test helper cannot take the
network down with it). Blocking (stdlib ``urllib``), usable from sync and
async tests alike (in async code, call through ``asyncio.to_thread``).

Lifecycle contract: :meth:`ProxyProcess.start` returns only once every
listener is bound (it reads the child's ready line, bounded in time);
:meth:`stop` ends the child by its PID (SIGTERM, then SIGKILL after a bounded
wait) and is idempotent. Use it in a fixture finalizer.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

_READY_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0
_HTTP_TIMEOUT_S = 10.0


class ProxyProcess:
    """One proxy child process serving the links ``{name: (host, port)}``."""

    def __init__(self, links: Mapping[str, tuple[str, int]]) -> None:
        if not links:
            raise ValueError("links must name at least one NAME -> (host, port) target")
        self._links = dict(links)
        self._proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.control_port: int | None = None
        self.ports: dict[str, int] = {}

    def start(self, timeout: float = _READY_TIMEOUT_S) -> ProxyProcess:
        """Start the child and wait (at most ``timeout`` s) for its ready line."""
        if self._proc is not None:
            raise RuntimeError("proxy process already started")
        argv = [sys.executable, "-m", "raftlog.faults.proxy_control"]
        for name, (host, port) in self._links.items():
            argv += ["--link", f"{name}={host}:{port}"]
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=None)
        self.pid = self._proc.pid
        try:
            ready = json.loads(self._read_line(timeout))
        except BaseException:
            self.stop()
            raise
        self.control_port = int(ready["control"])
        self.ports = {name: int(port) for name, port in ready["links"].items()}
        return self

    def _read_line(self, timeout: float) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + timeout
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"proxy process {self.pid} not ready within {timeout} s")
                if not sel.select(left):
                    continue
                chunk = os.read(self._proc.stdout.fileno(), 4096)
                if not chunk:
                    code = self._proc.wait(timeout=_STOP_TIMEOUT_S)
                    raise RuntimeError(f"proxy process {self.pid} exited with {code} before ready")
                buf += chunk
        return buf.split(b"\n", 1)[0].decode()

    def address(self, link: str) -> str:
        """``127.0.0.1:PORT``: where to connect to reach ``link``'s target through the proxy."""
        return f"127.0.0.1:{self.ports[link]}"

    def stop(self) -> None:
        """Stop the child by PID: SIGTERM, then SIGKILL after a bounded wait. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=_STOP_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control ----------------------------------------------------------------------------

    def cut(self, link: str | None = None, *, blackhole: bool = False) -> dict[str, Any]:
        return self._post("/cut", link, blackhole="1" if blackhole else "0")

    def heal(self, link: str | None = None) -> dict[str, Any]:
        return self._post("/heal", link)

    def delay(self, seconds: float, link: str | None = None) -> dict[str, Any]:
        return self._post("/delay", link, s=str(seconds))

    def drop_responses(self, link: str | None = None) -> dict[str, Any]:
        return self._post("/drop-responses", link)

    def status(self) -> dict[str, Any]:
        return self._request("GET", "/status", {})

    def _post(self, path: str, link: str | None, **params: str) -> dict[str, Any]:
        if link is not None:
            params["link"] = link
        return self._request("POST", path, params)

    def _request(self, method: str, path: str, params: dict[str, str]) -> dict[str, Any]:
        if self.control_port is None:
            raise RuntimeError("proxy process is not started")
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"http://127.0.0.1:{self.control_port}{path}{query}"
        req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=_HTTP_TIMEOUT_S) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise ValueError(f"proxy control {path}: {exc.code}: {exc.read().decode()}") from exc
