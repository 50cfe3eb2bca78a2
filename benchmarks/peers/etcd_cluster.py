"""A local 3-member etcd cluster on loopback ports, started and stopped by the harness.

Every member binds 127.0.0.1 only, keeps its data under the given directory,
and is stopped by its PID (SIGTERM, then SIGKILL after a grace period) even
when start-up fails half way. Start-up waits for every member's ``/health``
with a bounded deadline.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from benchmarks.peers.detect import ETCD_INSTALL_HINT, etcd_binary
from raftlog.cluster import free_ports

HOST = "127.0.0.1"
STOP_GRACE_S = 5.0


class EtcdError(RuntimeError):
    """etcd could not be started; the message says which member and shows its log tail."""


@dataclasses.dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"http://{HOST}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{HOST}:{self.peer_port}"


class EtcdCluster:
    """``with EtcdCluster(dir) as cluster: cluster.client_urls`` -> a healthy cluster.

    ``start()`` raises :class:`EtcdError` (after stopping whatever it started)
    when etcd is missing, a member exits, or the cluster is not healthy within
    ``start_timeout_s``. ``stop()`` is idempotent.
    """

    def __init__(self, base_dir: Path, members: int = 3, start_timeout_s: float = 30.0) -> None:
        if members < 1:
            raise ValueError(f"members must be >= 1, got {members}")
        if start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be > 0, got {start_timeout_s}")
        self.base_dir = Path(base_dir)
        self.start_timeout_s = start_timeout_s
        ports = free_ports(2 * members)
        self.members = [
            Member(
                name=f"m{i}",
                client_port=ports[2 * i],
                peer_port=ports[2 * i + 1],
                data_dir=self.base_dir / f"m{i}",
                log_path=self.base_dir / f"m{i}.log",
            )
            for i in range(members)
        ]

    @property
    def client_urls(self) -> list[str]:
        return [m.client_url for m in self.members]

    @property
    def pids(self) -> list[int]:
        return [m.process.pid for m in self.members if m.process is not None]

    def _command(self, binary: str, member: Member) -> list[str]:
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        return [
            binary,
            f"--name={member.name}",
            f"--data-dir={member.data_dir}",
            f"--listen-client-urls={member.client_url}",
            f"--advertise-client-urls={member.client_url}",
            f"--listen-peer-urls={member.peer_url}",
            f"--initial-advertise-peer-urls={member.peer_url}",
            f"--initial-cluster={initial}",
            "--initial-cluster-state=new",
            "--initial-cluster-token=raftlog-bench",
            "--log-level=warn",
        ]

    def start(self) -> EtcdCluster:
        binary = etcd_binary()
        if binary is None:
            raise EtcdError(ETCD_INSTALL_HINT)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        try:
            for member in self.members:
                with member.log_path.open("wb") as log:
                    member.process = subprocess.Popen(
                        self._command(binary, member),
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _healthy(self, member: Member) -> bool:
        try:
            with urllib.request.urlopen(f"{member.client_url}/health", timeout=1.0) as resp:
                return json.loads(resp.read()).get("health") == "true"
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        pending = list(self.members)
        while pending:
            for member in pending:
                assert member.process is not None
                if member.process.poll() is not None:
                    raise EtcdError(
                        f"etcd member {member.name} exited with {member.process.returncode}: "
                        f"{self._log_tail(member)}"
                    )
            pending = [m for m in pending if not self._healthy(m)]
            if pending and time.monotonic() > deadline:
                names = ", ".join(m.name for m in pending)
                raise EtcdError(
                    f"etcd members {names} not healthy within {self.start_timeout_s} s: "
                    f"{self._log_tail(pending[0])}"
                )
            if pending:
                time.sleep(0.1)

    @staticmethod
    def _log_tail(member: Member, lines: int = 5) -> str:
        try:
            return " | ".join(member.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop every member by PID: SIGTERM, then SIGKILL after the grace period."""
        running = [m.process for m in self.members if m.process and m.process.poll() is None]
        for process in running:
            process.terminate()
        for process in running:
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_GRACE_S)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
