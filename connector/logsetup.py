"""The connector's logger, made visible inside Spark's Python workers.

Nobody configures Python logging in a Spark worker process, and Python's
last-resort handler drops INFO, so the one-line batch summaries would vanish.
:func:`get_logger` therefore attaches a stderr handler to the
``pyspark_raftlog`` logger when neither it nor the root logger has one; an
application that configures logging itself keeps full control.
"""

from __future__ import annotations

import logging
import sys

_NAME = "pyspark_raftlog"


def get_logger() -> logging.Logger:
    """The ``pyspark_raftlog`` logger, at INFO with a stderr handler unless configured."""
    logger = logging.getLogger(_NAME)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger
