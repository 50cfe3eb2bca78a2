"""Deterministic simulation of raftlog's Raft: seeded network, disk and clock.

``run_seeds(range(1000))`` runs a thousand short seeded histories and returns a
:class:`~raftlog.sim.runner.Summary`; a failing seed prints itself and replays
exactly with ``run_seed(seed)``.
"""

from raftlog.sim.runner import SeedResult, SimConfig, Summary, run_seed, run_seeds

__all__ = ["SeedResult", "SimConfig", "Summary", "run_seed", "run_seeds"]
