"""One module per scenario; each registers itself with :func:`benchmarks.registry.scenario`.

Modules whose name starts with ``_`` are not loaded as scenarios.
"""
