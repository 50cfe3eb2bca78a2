"""A Spark standalone cluster on loopback for the tests: one master and its workers,
started with pyspark's own ``bin/spark-class`` and stopped by PID.

Each daemon runs in a process group of its own (``start_new_session``), whose id is the
daemon's PID; the executors a worker launches, and their Python workers, stay in that
group. Stopping sends SIGTERM to the daemon's PID (a worker then stops its executors),
waits a bounded time, and SIGKILLs what is left of the group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from raftlog.cluster import free_ports

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0


@dataclass
class StandaloneCluster:
    """A running master (``url``) with ``workers`` registered workers."""

    url: str
    ui_port: int
    log_dir: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return int(json.load(r).get("aliveworkers", 0))

    def logs(self, chars: int = 2000) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )

    def stop(self) -> None:
        for proc in reversed(self.procs):  # workers first, then the master
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for proc in self.procs:  # leftovers of the group: executors, Python workers
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)


def daemon_env() -> dict[str, str]:
    import pyspark

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR")}
    env.update(
        SPARK_HOME=str(Path(pyspark.__file__).resolve().parent),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY="256m",
        # no REST submission server: it would listen on the fixed port 6066
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    return env


def _spawn(
    cluster: StandaloneCluster,
    name: str,
    args: list[str],
    env_extra: Mapping[str, str] | None = None,
) -> None:
    env = daemon_env() | dict(env_extra or {})
    spark_class = Path(env["SPARK_HOME"]) / "bin" / "spark-class"
    with open(cluster.log_dir / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(
            [str(spark_class), *args],
            env=env,
            cwd=cluster.log_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cluster.procs.append(proc)


WORKER_HOSTS = ("127.0.0.2", "127.0.0.3")
"""Distinct loopback hosts for two workers, so that Spark sees two hosts (it never runs
a speculative copy of a task on a host where an attempt of it already runs)."""


def start_standalone(
    work: Path, workers: int = 2, worker_hosts: Sequence[str] | None = None
) -> StandaloneCluster:
    """Start a master and ``workers`` workers (1 core, 1g each); return once every worker
    is registered. On failure everything started is stopped again.

    The master is on 127.0.0.1, and so is every worker unless ``worker_hosts`` names one
    loopback address per worker (e.g. 127.0.0.2, 127.0.0.3): that worker then binds there
    and gets it as ``SPARK_LOCAL_IP``, which its executors inherit, so Spark sees them on
    distinct hosts (speculation never runs a copy of a task on a host already running it).
    """
    hosts = list(worker_hosts) if worker_hosts is not None else ["127.0.0.1"] * workers
    if len(hosts) != workers:
        raise ValueError(f"{workers} workers but worker_hosts {hosts}")
    work.mkdir(parents=True, exist_ok=True)
    port, ui_port, *worker_ui = free_ports(2 + workers)
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", ui_port, work)
    try:
        _spawn(
            cluster,
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)),
            ],
        )
        for i, (ui, host) in enumerate(zip(worker_ui, hosts, strict=True)):
            _spawn(
                cluster,
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    cluster.url,
                    *("--host", host, "--cores", "1", "--memory", "1g"),
                    *("--webui-port", str(ui), "--work-dir", str(work / f"worker-{i}")),
                ],
                {"SPARK_LOCAL_IP": host},
            )
        _wait_ready(cluster, workers)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_ready(cluster: StandaloneCluster, workers: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:  # bounded by the deadline
        dead = [p.args[1] for p in cluster.procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"Spark daemons exited early: {dead}\n{cluster.logs()}")
        with contextlib.suppress(OSError, ValueError):
            if cluster.alive_workers() >= workers:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{workers} Spark workers not registered in {READY_TIMEOUT_S}s\n{cluster.logs()}"
            )
        time.sleep(0.5)
