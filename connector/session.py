"""A SparkSession configured from the project's ``spark_conf/`` folder.

``spark_conf/spark-defaults.conf`` holds the settings (local master, Python
worker reuse, Arrow batch size, few shuffle partitions) and
``spark_conf/log4j2.properties`` the JVM log level (WARN). The package is
installed editable from ``connector/``, so the folder is found next to it, at
``<repo>/spark_conf``.

Spark finds ``DefaultSource`` by listing ``pyspark_*`` modules with
``pkgutil.iter_modules()`` in a Python worker. The project is installed in
setuptools' *strict* editable mode (a link tree, not an import hook), so
``pyspark_raftlog`` is listable under any session, built here or not.

A session built here also registers ``DefaultSource`` itself
(``spark.dataSource.register``), as Spark's docs show for any Python data source:
Spark then plans a raftlog write in the session's own Python workers, beside
every other Python data source of the session, instead of in a second pool kept
for statically found sources. Measured with pyspark 4.3 (docs/performance.md):
a small ``df.write`` took 50-130 ms less, about a third of it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["build_session", "read_spark_defaults", "spark_conf_dir"]


def spark_conf_dir() -> Path:
    """``<repo>/spark_conf``; FileNotFoundError naming the path when it is missing."""
    path = Path(__file__).resolve().parent.parent / "spark_conf"
    if not (path / "spark-defaults.conf").is_file():
        raise FileNotFoundError(
            f"raftlog's Spark configuration is missing: expected {path / 'spark-defaults.conf'} "
            "(pyspark_raftlog.session needs the repository checkout it was installed from "
            "with `pip install -e`)"
        )
    return path


def read_spark_defaults(path: Path) -> dict[str, str]:
    """``key value`` lines of a spark-defaults.conf; '#' comments and blank lines skipped."""
    conf: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise ValueError(f"{path}:{number}: expected 'key value', got {line!r}")
        conf[parts[0]] = parts[1].strip()
    return conf


def build_session(app_name: str, master: str | None = None) -> SparkSession:
    """A SparkSession with ``spark_conf/``'s settings; ``master`` overrides ``spark.master``.

    Also points ``SPARK_CONF_DIR`` at ``spark_conf/`` (unless already set) so the
    JVM picks up ``log4j2.properties``, and sets ``PYSPARK_PYTHON`` and
    ``PYSPARK_DRIVER_PYTHON`` to this interpreter (unless set) so workers run with
    the same packages. These only take effect when this
    call starts the JVM; an already running session is returned as it is, with the
    settings applied where Spark allows it.
    """
    from pyspark.sql import SparkSession

    conf_dir = spark_conf_dir()
    os.environ.setdefault("SPARK_CONF_DIR", str(conf_dir))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    for key, value in read_spark_defaults(conf_dir / "spark-defaults.conf").items():
        builder = builder.config(key, value)
    if master is not None:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    from pyspark_raftlog.datasource import DefaultSource

    spark.dataSource.register(DefaultSource)
    return spark
