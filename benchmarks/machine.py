"""The machine and the versions a run measured on (printed and written with the results).

Linux-first (reads /proc and /sys); every probe degrades to ``"unknown"``
rather than failing the run on another platform.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

UNKNOWN = "unknown"

VERSIONED = ("raftlog", "pyspark", "pyarrow", "aiohttp")
"""Distributions whose versions every run reports (beside Python's)."""


def versions() -> dict[str, str]:
    """Python and the :data:`VERSIONED` distributions (``"not installed"`` when missing)."""
    found = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = "not installed"
    return found


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or UNKNOWN


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _mount_of(path: Path) -> tuple[str, str, str]:
    """(mount point, device, filesystem type) holding ``path``, from /proc/self/mountinfo."""
    real = str(path.resolve())
    best = ("", UNKNOWN, UNKNOWN)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        # Fields: id parent maj:min root mountpoint opts [optional...] - fstype source superopts
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 2:
            continue
        mount = fields[4].replace("\\040", " ")
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        # The longest matching mount point wins; a later equal one shadows an earlier one.
        if inside and len(mount) >= len(best[0]):
            best = (mount, tail[1], tail[0])
    return best


def _rotational(path: Path) -> str:
    """``"ssd"``, ``"hdd"`` or unknown, from the block device's queue/rotational flag."""
    try:
        dev = os.stat(path).st_dev
        flag = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/queue/rotational")
        if not flag.exists():  # a partition: the flag lives on the parent device
            flag = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/../queue/rotational")
        return "hdd" if flag.read_text().strip() == "1" else "ssd"
    except (OSError, ValueError):
        return UNKNOWN


def machine(out_dir: Path) -> dict[str, str | int | float | None]:
    """Cores, memory, OS, and the disk (device, filesystem, kind, free space) of ``out_dir``."""
    probe = out_dir if out_dir.exists() else Path.cwd()
    mount, device, fstype = _mount_of(probe)
    try:
        stat = os.statvfs(probe)
        free_gib: float | None = round(stat.f_bavail * stat.f_frsize / 2**30, 1)
    except OSError:
        free_gib = None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    memory = _memory_bytes()
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "memory_gib": round(memory / 2**30, 1) if memory else None,
        "disk_path": str(probe.resolve()),
        "disk_mount": mount or UNKNOWN,
        "disk_device": device,
        "disk_filesystem": fstype,
        "disk_kind": _rotational(probe),
        "disk_free_gib": free_gib,
        "python_executable": sys.executable,
    }


def git(where: Path, *args: str) -> str | None:
    """``git -C where ARGS...``'s stdout, stripped; None when git fails or is missing."""
    try:
        return subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit(repo: Path | None = None) -> str:
    """The short commit of ``repo`` (this checkout by default), ``+dirty`` with local edits.

    Untracked files (``benchmarks/results/`` among them) do not count. ``"unknown"``
    outside git.
    """
    where = repo or Path(__file__).resolve().parent.parent
    head = git(where, "rev-parse", "--short=10", "HEAD")
    status = git(where, "status", "--porcelain", "--untracked-files=no")
    if not head or status is None:
        return UNKNOWN
    return head + ("+dirty" if status else "")


def load_average() -> float | None:
    """The 1-minute load average, or None where the OS has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None
