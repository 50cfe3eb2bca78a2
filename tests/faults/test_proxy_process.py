"""The proxy as a separate process, driven over its HTTP control API."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from proxy_helpers import EchoServer, closed_by_peer, connect, read_nothing, roundtrip

from raftlog.faults.proxy_process import ProxyProcess


@pytest.fixture
async def echo():
    server = await EchoServer().start()
    yield server
    await server.stop()


@pytest.fixture
async def proxies(echo):
    other = await EchoServer().start()
    proc = ProxyProcess({"a": ("127.0.0.1", echo.port), "b": ("127.0.0.1", other.port)})
    await asyncio.to_thread(proc.start)
    yield proc, other
    proc.stop()  # by PID: SIGTERM, then SIGKILL after a bounded wait
    await other.stop()


async def test_links_forward_and_are_controlled_one_by_one(echo, proxies):
    proc, other = proxies
    assert await roundtrip(proc.ports["a"], b"to-a") == b"to-a"
    assert await roundtrip(proc.ports["b"], b"to-b") == b"to-b"
    assert (echo.received, other.received) == (b"to-a", b"to-b")

    status = await asyncio.to_thread(proc.cut, "a")
    assert status["links"]["a"]["mode"] == "cut" and status["links"]["b"]["mode"] == "pass"
    reader, writer = await connect(proc.ports["a"])
    writer.write(b"x")
    assert await closed_by_peer(reader)
    writer.transport.abort()
    assert echo.received == b"to-a"
    assert await roundtrip(proc.ports["b"], b"still") == b"still"  # only link a is cut

    await asyncio.to_thread(proc.heal, "a")
    assert await roundtrip(proc.ports["a"], b"back") == b"back"


async def test_drop_responses_over_control_api(echo, proxies):
    proc, _ = proxies
    await asyncio.to_thread(proc.drop_responses)  # every link
    reader, writer = await connect(proc.ports["a"])
    writer.write(b"landed")
    await writer.drain()
    assert await echo.wait_received(6) == b"landed"
    assert await read_nothing(reader)
    writer.transport.abort()
    status = await asyncio.to_thread(proc.status)
    assert status["links"]["a"]["bytes_dropped"] == 6
    await asyncio.to_thread(proc.heal)
    await asyncio.to_thread(proc.delay, 0.05, "a")
    status = await asyncio.to_thread(proc.status)
    assert status["links"]["a"]["delay_s"] == 0.05 and status["links"]["b"]["delay_s"] == 0.0
    assert await roundtrip(proc.ports["a"], b"again") == b"again"


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("/delay?s=-1", "s: expected seconds in [0, 60]"),
        ("/delay", "s: expected seconds in [0, 60], got None"),
        ("/cut?link=zz", "link: unknown link 'zz'"),
        ("/cut?blackhole=maybe", "blackhole: expected 0 or 1"),
    ],
)
async def test_bad_control_parameters_get_400_naming_them(proxies, path, needle):
    proc, _ = proxies
    url = f"http://127.0.0.1:{proc.control_port}{path}"

    def post() -> tuple[int, str]:
        req = urllib.request.Request(url, method="POST", data=b"")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    code, text = await asyncio.to_thread(post)
    assert code == 400 and needle in text


async def test_stop_ends_the_child_by_pid(echo):
    proc = ProxyProcess({"a": ("127.0.0.1", echo.port)})
    await asyncio.to_thread(proc.start)
    try:
        pid = proc.pid
        assert pid is not None and pid != os.getpid()
        assert await roundtrip(proc.ports["a"], b"x") == b"x"
    finally:
        proc.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: the PID no longer exists for us
    proc.stop()  # idempotent


def test_ready_line_reports_ports_and_shorthand_flags():
    child = subprocess.Popen(
        [sys.executable, "-m", "raftlog.faults.proxy_control", "--target", "127.0.0.1:9",
         "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        ready = json.loads(child.stdout.readline())
        assert ready["pid"] == child.pid and set(ready["links"]) == {"link"}
        assert ready["links"]["link"] > 0 and ready["control"] > 0
    finally:
        child.terminate()
        assert child.wait(timeout=10) == 0  # SIGTERM is a clean stop
        child.stdout.close()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([], "give at least one --link"),
        (["--link", "a"], "--link must be NAME=HOST:PORT"),
        (["--link", "a=127.0.0.1:x"], "--link a must be HOST:PORT"),
        (["--link", "a=h:1", "--link", "a=h:2"], "name 'a' is given twice"),
        (["--link", "a=h:1", "--listen-host", "0.0.0.0"], "--listen-host must be a loopback"),
        (["--listen", "127.0.0.1:0"], "--listen goes with --target"),
    ],
)
def test_bad_command_line_is_named(argv, needle):
    child = subprocess.run(
        [sys.executable, "-m", "raftlog.faults.proxy_control", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 2
    assert needle in child.stderr and child.stdout == ""
