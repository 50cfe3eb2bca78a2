"""A local 3-node PySyncObj cluster: node processes on loopback ports, stopped by PID.

Each node is ``pysyncobj_node.py`` in its own process (a SyncObj per process, as
PySyncObj's benchmark runs it), controlled through JSON lines on its stdin and
stdout. Every answer is awaited with a deadline: a reader thread per node feeds
a queue, so a stuck node makes :class:`PySyncObjError`, never a hang.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from benchmarks.peers.detect import PYSYNCOBJ_INSTALL_HINT, pysyncobj_missing
from benchmarks.peers.etcd_cluster import HOST, STOP_GRACE_S
from raftlog.cluster import free_ports

NODE_SCRIPT = Path(__file__).with_name("pysyncobj_node.py")
ANSWER_TIMEOUT_S = 15.0


class PySyncObjError(RuntimeError):
    """A node could not be started or did not answer; the message says which and why."""


class _Node:
    """One node process and the queue of its answer lines."""

    def __init__(self, address: str, partners: list[str], log_path: Path) -> None:
        self.address = address
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(NODE_SCRIPT), address, *partners],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                bufsize=1,
            )
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        for line in stdout:
            self._answers.put(line)
        self._answers.put(None)  # end of output: the process exited

    def call(self, msg: dict[str, Any], timeout_s: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
        """Send one command and wait (bounded) for its answer; errors raise PySyncObjError."""
        stdin = self.process.stdin
        if stdin is None or self.process.poll() is not None:
            raise PySyncObjError(f"pysyncobj node {self.address} is not running: {self.tail()}")
        try:
            stdin.write(json.dumps(msg) + "\n")
            stdin.flush()
            line = self._answers.get(timeout=timeout_s)
        except (OSError, queue.Empty) as exc:
            raise PySyncObjError(
                f"pysyncobj node {self.address} did not answer {msg.get('cmd')!r} "
                f"within {timeout_s} s: {self.tail()}"
            ) from exc
        if line is None:
            raise PySyncObjError(f"pysyncobj node {self.address} exited: {self.tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise PySyncObjError(f"pysyncobj node {self.address}: {answer['error']}")
        return answer

    def tail(self, lines: int = 5) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class PySyncObjCluster:
    """``with PySyncObjCluster(dir) as cluster:`` -> nodes that agree on a leader.

    ``start()`` raises :class:`PySyncObjError` (after stopping what it started)
    when PySyncObj is missing, a node exits, or no leader is agreed within
    ``start_timeout_s``. ``stop()`` asks each node to quit, then SIGTERM and
    SIGKILL by PID; it is idempotent.
    """

    def __init__(self, base_dir: Path, nodes: int = 3, start_timeout_s: float = 30.0) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        if start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be > 0, got {start_timeout_s}")
        self.base_dir = Path(base_dir)
        self.start_timeout_s = start_timeout_s
        self.addresses = [f"{HOST}:{port}" for port in free_ports(nodes)]
        self.nodes: list[_Node] = []

    @property
    def pids(self) -> list[int]:
        return [n.process.pid for n in self.nodes]

    def start(self) -> PySyncObjCluster:
        if pysyncobj_missing():
            raise PySyncObjError(PYSYNCOBJ_INSTALL_HINT)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        try:
            for i, address in enumerate(self.addresses):
                partners = [a for a in self.addresses if a != address]
                self.nodes.append(_Node(address, partners, self.base_dir / f"node{i}.log"))
            self._wait_leader()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_leader(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            leaders = {n.call({"cmd": "status"})["leader"] for n in self.nodes}
            if len(leaders) == 1 and None not in leaders:
                return
            if time.monotonic() > deadline:
                raise PySyncObjError(
                    f"pysyncobj nodes agreed on no leader within {self.start_timeout_s} s "
                    f"(they see {sorted(map(str, leaders))}): {self.nodes[0].tail()}"
                )
            time.sleep(0.1)

    def call(self, index: int, msg: dict[str, Any], timeout_s: float = ANSWER_TIMEOUT_S) -> Any:
        """Send ``msg`` to node ``index``; its answer."""
        return self.nodes[index].call(msg, timeout_s)

    def bench(self, seconds: float, size: int, inflight: int) -> list[dict[str, Any]]:
        """Run ``bench`` on every node at once (commands submitted inside each process,
        as PySyncObj's benchmark does); one answer per node."""
        msg = {"cmd": "bench", "seconds": seconds, "size": size, "inflight": inflight}
        for node in self.nodes:  # send to all first so the nodes load the cluster together
            assert node.process.stdin is not None
            node.process.stdin.write(json.dumps(msg) + "\n")
            node.process.stdin.flush()
        answers = []
        for node in self.nodes:
            try:
                line = node._answers.get(timeout=seconds + ANSWER_TIMEOUT_S)
            except queue.Empty as exc:
                raise PySyncObjError(f"pysyncobj node {node.address} bench hung") from exc
            if line is None:
                raise PySyncObjError(f"pysyncobj node {node.address} exited: {node.tail()}")
            answer = json.loads(line)
            if "error" in answer:
                raise PySyncObjError(f"pysyncobj node {node.address}: {answer['error']}")
            answers.append(answer)
        return answers

    def stop(self) -> None:
        """Ask every node to quit, then SIGTERM and SIGKILL by PID those still running."""
        running = [n for n in self.nodes if n.process.poll() is None]
        for node in running:
            try:
                assert node.process.stdin is not None
                node.process.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                node.process.stdin.close()
            except (OSError, ValueError):
                pass  # already gone or its pipe is closed: the signals below still apply
        for node in running:
            try:
                node.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                node.process.terminate()
                try:
                    node.process.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait(timeout=STOP_GRACE_S)

    def __enter__(self) -> PySyncObjCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
