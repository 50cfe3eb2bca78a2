"""Malloc settings for processes that move MiB-sized buffers: they stay in the heap.

Used by the node at start and by a Spark worker that runs the connector (its
4 MiB chunks and their requests). A node handles payloads of a few hundred KiB
to a few MiB at a time (a client's append, a replication frame, a segment
write). glibc serves allocations above its mmap threshold with a fresh
``mmap`` and returns them with ``munmap``, and gives the heap's free top back to
the kernel past its trim threshold: either way the next buffer's pages fault in
and are zeroed again. In the ``spark`` benchmark
that was a fifth of a node's kernel time (page faults, page clearing, unmapping
under ``memmove``). Raising both thresholds keeps those pages in the process,
as Redpanda's Seastar allocator keeps its memory; the heap then holds about the
largest working set the node has had.
"""

from __future__ import annotations

import ctypes
import logging
import platform

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
"""glibc's largest accepted mmap threshold on 64-bit: buffers up to it come from the heap."""
TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024
"""Free memory at the heap's top kept before it is returned to the kernel."""


def keep_large_buffers_in_heap() -> bool:
    """Apply the settings above when the C library is glibc; True when it took them.

    Elsewhere (musl, macOS) it does nothing: the settings only save kernel time.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    taken = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    if not taken:
        log.warning("mallopt refused the node's thresholds; large buffers use mmap")
    return taken
