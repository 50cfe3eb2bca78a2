"""raftlog: a replicated, partitioned log on Raft, in the style of Redpanda.

The engine never imports Spark; the Spark connector (``pyspark_raftlog``) speaks
to it through :mod:`raftlog.client` only.
"""

__version__ = "0.1.0"
