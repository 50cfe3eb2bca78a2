"""Is a peer installed? Each probe returns None when it is, else how to install it."""

from __future__ import annotations

import importlib.util
import shutil

ETCD_INSTALL_HINT = (
    "etcd is not installed: on Debian or Ubuntu run `apt-get install etcd-server` "
    "(it provides the `etcd` binary)"
)
AETCD_INSTALL_HINT = (
    "aetcd (etcd's gRPC API from asyncio) is not installed: run `pip install aetcd` "
    "(it belongs in the project's benchmark extra)"
)
PYSYNCOBJ_INSTALL_HINT = (
    "PySyncObj is not installed: run `pip install pysyncobj` "
    "(it belongs in the project's benchmark extra)"
)


def etcd_binary() -> str | None:
    """The path of the ``etcd`` server binary on PATH, or None."""
    return shutil.which("etcd")


def etcd_missing() -> str | None:
    """None when etcd can be started here, else the install hint."""
    return None if etcd_binary() else ETCD_INSTALL_HINT


def pysyncobj_missing() -> str | None:
    """None when PySyncObj imports here, else the install hint."""
    return None if importlib.util.find_spec("pysyncobj") else PYSYNCOBJ_INSTALL_HINT


def aetcd_missing() -> str | None:
    """None when the gRPC client ``aetcd`` imports here, else the install hint."""
    return None if importlib.util.find_spec("aetcd") else AETCD_INSTALL_HINT
