"""The connector's logger, made visible inside Spark's Python workers.

Nobody configures Python logging in a Spark worker process, and Python's
last-resort handler drops INFO, so the one-line batch summaries would vanish.
:func:`get_logger` therefore attaches a stderr handler to the
``pyspark_raftlog`` logger when neither it nor the root logger has one; an
application that configures logging itself keeps full control.

Its level is INFO, or ``$PYSPARK_RAFTLOG_LOG_LEVEL`` (``DEBUG``, ``INFO``,
``WARNING``, ``ERROR``) in the environment Spark's workers inherit from the
driver: the demo, which prints a line per micro-batch itself, sets ``WARNING`` so
that the sink's own per-batch summary does not say it twice.
"""

from __future__ import annotations

import logging
import os
import sys

_NAME = "pyspark_raftlog"
LEVEL_ENV = "PYSPARK_RAFTLOG_LOG_LEVEL"
_LEVELS = {name: getattr(logging, name) for name in ("DEBUG", "INFO", "WARNING", "ERROR")}


def get_logger() -> logging.Logger:
    """The ``pyspark_raftlog`` logger, at INFO (or ``$PYSPARK_RAFTLOG_LOG_LEVEL``) with a
    stderr handler unless configured."""
    logger = logging.getLogger(_NAME)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        # an unknown name keeps INFO: a worker must not fail a task over a log setting
        logger.setLevel(_LEVELS.get(os.environ.get(LEVEL_ENV, "").upper(), logging.INFO))
        logger.propagate = False
    return logger
