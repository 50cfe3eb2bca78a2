"""Who may read a node's files: its data directory is its user's alone, and so should
be every file that holds a secret (the TLS key, a token file).

The storage layer creates what it makes private (:data:`PRIVATE_DIR_MODE`,
:data:`PRIVATE_FILE_MODE` in :mod:`raftlog.storage.fs`); this module deals with what
existed before: :func:`tighten_data_dir` takes group's and others' access away from
a data directory made by an older version or by hand (everything beneath is then out
of their reach, whatever its own mode), and :func:`warn_if_readable_by_others` warns
about a secret file that group or others can read. Neither refuses to start: a
node's files are its operator's, and the warning says what to run.
"""

from __future__ import annotations

import logging
import os
import pathlib
import stat

from raftlog.storage.fs import PRIVATE_DIR_MODE

log = logging.getLogger("raftlog.node")

# the bits that let anyone but the owner read, write or enter
_SHARED_BITS = stat.S_IRWXG | stat.S_IRWXO


def tighten_data_dir(path: str | os.PathLike[str]) -> int | None:
    """Take group's and others' access away from the existing directory ``path``.

    Returns the mode it had when it was changed (after logging a warning that names
    the directory and both modes), None when nothing was changed: the directory does
    not exist yet (it will be created :data:`PRIVATE_DIR_MODE`), is no directory,
    is private already, or cannot be changed (not the node's user's: a warning says so, and the node
    runs on).
    """
    path = pathlib.Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISDIR(st.st_mode) or not mode & _SHARED_BITS:
        return None  # a file in the way is for the directory's own check to name
    tight = mode & ~_SHARED_BITS
    try:
        os.chmod(path, tight)
    except OSError as exc:
        log.warning(
            "data directory %s is open to group or others (mode %04o) and could not be "
            "made %04o (%s): its logs and state are readable by other users; run "
            "`chmod 700 %s`",
            path,
            mode,
            tight,
            exc,
            path,
        )
        return None
    log.warning(
        "data directory %s was mode %04o, open to group or others; made it %04o "
        "(the node's user only, as a new one is created: %04o)",
        path,
        mode,
        tight,
        PRIVATE_DIR_MODE,
    )
    return mode


def readable_by_others_warning(path: str | os.PathLike[str], flag: str) -> str | None:
    """The warning for a secret file (given by ``flag``, e.g. ``--tls-key`` or a
    ``--*-token-file``) that group or others may read; None when only its owner can,
    and when it cannot be looked at (the flag's own check reports a missing file)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
    readers = [
        who for who, bit in (("group", stat.S_IRGRP), ("others", stat.S_IROTH)) if mode & bit
    ]
    if not readers:
        return None
    return (
        f"{flag}: {path} is readable by {' and '.join(readers)} (mode {mode:04o}): "
        f"any local user who can read it holds the secret; run `chmod 600 {path}`"
    )


def warn_if_readable_by_others(path: str | os.PathLike[str], flag: str) -> str | None:
    """Log :func:`readable_by_others_warning` as a WARNING when there is one; return it.

    Call it once logging is set up (``run_server`` does, at every start)."""
    warning = readable_by_others_warning(path, flag)
    if warning is not None:
        log.warning("%s", warning)
    return warning
