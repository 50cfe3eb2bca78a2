"""Only what setup.cfg cannot say: `find:` cannot discover the connector, which
installs as `pyspark_raftlog` from the folder `connector/` (flat: its modules
are `pyspark_raftlog.*`). Everything else is in setup.cfg."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["raftlog", "raftlog.*"]), "pyspark_raftlog"],
    package_dir={"pyspark_raftlog": "connector"},
)
