"""The console: a read-only web page of a cluster and the Spark queries writing to it.

:mod:`raftlog.console.view` gathers what the page shows through the client API and
the nodes' read-only routes; :mod:`raftlog.console.page` is its template;
:mod:`raftlog.console.app` serves it (``raftlog console``, or a node's ``/console``
with ``--console``).
"""
