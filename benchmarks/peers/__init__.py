"""The systems raftlog is compared with (etcd, PySyncObj): detecting and launching them.

Not a scenario package: the ``peers`` scenario (not written yet) builds on these.
"""
