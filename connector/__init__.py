"""pyspark_raftlog: the Spark data source for raftlog (installed from the folder ``connector/``).

Spark registers ``DefaultSource`` from a module named ``pyspark_<name>``
automatically, so ``format("raftlog")`` needs no ``spark.dataSource.register``.
"""
