"""The raftlog benchmark harness: ``python -m benchmarks [SCENARIO ...] [--quick] [--out DIR]``.

Run from the repository root (the package is not installed into site-packages).
Each scenario lives in its own module under :mod:`benchmarks.scenarios` and
registers itself with :func:`benchmarks.registry.scenario`; see README.md.
"""
