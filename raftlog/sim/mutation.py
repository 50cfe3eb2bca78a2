"""Mutation testing of the simulator: plant each named fault in the core, count the seeds
that catch it.

A simulator that misses a planted bug would miss a real one. For each mutation of
:data:`raftlog.raft.mutations.MUTATIONS` (or the ones asked for), every seed is run
with that mutation planted; a seed *catches* it when it fails (an invariant, a
``SafetyViolation``, a task or handler exception, a lost write). The unmutated
core must pass every one of the same seeds, or the score means nothing:
:func:`run_mutations` reports the baseline's failures as the mutation ``"none"``.

``python -m benchmarks sim --mutations`` prints the table; the target is at
least 90 % of 300 seeds per mutation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from raftlog.raft import mutations
from raftlog.sim.runner import SimConfig, run_seed

BASELINE = "none"


@dataclasses.dataclass(frozen=True, slots=True)
class MutationScore:
    mutation: str
    caught: int
    seeds: int
    # The first few seeds that did not catch it (replay each with the mutation planted).
    missed: tuple[int, ...]

    @property
    def fraction(self) -> float:
        return self.caught / self.seeds if self.seeds else 0.0


def _fails(seed: int, mutation: str, config: SimConfig | None) -> bool:
    """Run ``seed`` with ``mutation`` planted (in this process); True when the seed fails."""
    if mutation == BASELINE:
        return not run_seed(seed, config).ok
    with mutations.planted(mutation):
        return not run_seed(seed, config).ok


def run_mutations(
    seeds: Iterable[int],
    names: Sequence[str] | None = None,
    config: SimConfig | None = None,
    processes: int = 1,
) -> list[MutationScore]:
    """The baseline (``"none"``: how many seeds fail unmutated, must be 0), then one score
    per mutation: how many of ``seeds`` caught it. Worker processes are spawned, so each
    plants its mutation in its own interpreter."""
    seed_list = list(seeds)
    chosen = list(names) if names else list(mutations.MUTATIONS)
    for name in chosen:
        if name not in mutations.MUTATIONS:
            raise ValueError(f"unknown mutation {name!r}; one of {', '.join(mutations.MUTATIONS)}")
    jobs = [(s, m, config) for m in [BASELINE, *chosen] for s in seed_list]
    if processes > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            failed = pool.starmap(_fails, jobs, chunksize=8)
    else:
        failed = [_fails(*job) for job in jobs]
    scores = []
    for i, name in enumerate([BASELINE, *chosen]):
        part = failed[i * len(seed_list) : (i + 1) * len(seed_list)]
        missed = tuple(s for s, f in zip(seed_list, part, strict=True) if not f)
        scores.append(MutationScore(name, sum(part), len(seed_list), missed[:10]))
    return scores


def format_scores(scores: Sequence[MutationScore]) -> str:
    """A plain-text table: mutation, seeds that caught it, fraction, first missed seeds."""
    lines = [f"{'mutation':<26} {'caught':>12} {'%':>6}  missed (first 10)"]
    for s in scores:
        label = "baseline failures" if s.mutation == BASELINE else s.mutation
        lines.append(
            f"{label:<26} {s.caught:>5} / {s.seeds:<5} {100 * s.fraction:>5.1f}  "
            f"{list(s.missed) if s.mutation != BASELINE else ''}"
        )
    return "\n".join(lines)
