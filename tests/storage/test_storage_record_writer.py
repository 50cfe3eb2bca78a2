"""RecordWriter: many groups' vote records behind one shared sync, atomic across a power cut."""

from __future__ import annotations

import asyncio
import concurrent.futures
import pathlib
import threading

from raftlog.storage.api import VoteState
from raftlog.storage.durable_record import load_record
from raftlog.storage.fs import ModelFileSystem
from raftlog.storage.record_writer import RecordWriter
from raftlog.storage.vote_store import VoteStore

GROUPS = 64
ROOT = pathlib.Path("/data")


class PowerCut(Exception):
    pass


def make_groups(fs: ModelFileSystem) -> list[VoteStore]:
    """GROUPS vote stores, each with a durable vote (term 1, voted for 1)."""
    stores = []
    for g in range(GROUPS):
        d = ROOT / f"g{g}"
        fs.mkdirs(d)
        store = VoteStore(d, fs)
        store.save(VoteState(term=1, voted_for=1))
        stores.append(store)
    fs.syncfs(ROOT)  # the directories' names durable too (as a node's are once made)
    return stores


def new_vote(g: int) -> VoteState:
    return VoteState(term=5 + g, voted_for=g % 3 + 1)


async def save_all(writer: RecordWriter, stores: list[VoteStore]) -> list[BaseException | None]:
    results = await asyncio.gather(
        *(writer.save(*s.framed(new_vote(g))) for g, s in enumerate(stores)),
        return_exceptions=True,
    )
    return [r if isinstance(r, BaseException) else None for r in results]


def counting_barrier(fs: ModelFileSystem, calls: list[int], cut_at: int = 0, seed: int = 0):
    """The node's syncfs over the model disk; its ``cut_at``-th call cuts the power instead."""

    async def barrier() -> None:
        calls.append(1)
        if len(calls) == cut_at:
            fs.crash(seed)  # a seeded prefix of what was not synced survives, torn or not
            raise PowerCut()
        await asyncio.to_thread(fs.syncfs, ROOT)

    return barrier


async def test_one_batch_and_two_syncs_make_every_groups_vote_durable() -> None:
    fs = ModelFileSystem()
    stores = make_groups(fs)
    calls: list[int] = []
    writer = RecordWriter(fs, counting_barrier(fs, calls))
    assert await save_all(writer, stores) == [None] * GROUPS
    assert writer.records == GROUPS
    assert writer.batches == 1, "saves asked for in one loop turn share one batch"
    assert len(calls) == 2  # the .tmp files, then the renames: two syncs for 64 groups
    fs.crash(seed=1, keep_unsynced=False)  # only what a sync made durable survives
    assert [VoteStore(ROOT / f"g{g}", fs).load() for g in range(GROUPS)] == [
        new_vote(g) for g in range(GROUPS)
    ]


async def test_without_a_barrier_each_record_is_fsynced_in_a_thread() -> None:
    fs = ModelFileSystem()
    stores = make_groups(fs)
    writer = RecordWriter(fs)
    assert await save_all(writer, stores) == [None] * GROUPS
    fs.crash(seed=2, keep_unsynced=False)
    assert [VoteStore(ROOT / f"g{g}", fs).load() for g in range(GROUPS)] == [
        new_vote(g) for g in range(GROUPS)
    ]


async def test_saves_do_not_wait_for_the_loops_default_executor() -> None:
    """The writer's threads are its own: with the loop's default executor held by other
    work (a failover's thousand segment seals and start snapshots), a batch of votes is
    made durable at once. In the default executor (planted: ``_in_thread`` as
    ``asyncio.to_thread``) they waited behind that work, and the elections with them."""
    fs = ModelFileSystem()
    stores = make_groups(fs)
    loop = asyncio.get_running_loop()
    busy = concurrent.futures.ThreadPoolExecutor(1)
    loop.set_default_executor(busy)
    release = threading.Event()
    held = loop.run_in_executor(None, release.wait, 30.0)  # the default executor, held
    writer = RecordWriter(fs)
    try:
        got = await asyncio.wait_for(save_all(writer, stores), 10.0)
    finally:
        release.set()
        await held
        writer.close()
    assert got == [None] * GROUPS
    fs.crash(seed=3, keep_unsynced=False)
    assert [VoteStore(ROOT / f"g{g}", fs).load() for g in range(GROUPS)] == [
        new_vote(g) for g in range(GROUPS)
    ]


async def test_a_power_cut_during_a_batch_leaves_each_record_old_or_new_never_damaged() -> None:
    """Cut at the first sync (only .tmp files written) or the second (renames done): for
    60 seeds of what survived, every record loads (CRC intact) as the old vote or the new
    one; nobody was told their save succeeded."""
    outcomes = set()
    for seed in range(60):
        for cut_at in (1, 2):
            fs = ModelFileSystem()
            stores = make_groups(fs)
            writer = RecordWriter(fs, counting_barrier(fs, [], cut_at, seed))
            results = await save_all(writer, stores)
            assert all(isinstance(r, PowerCut) for r in results), results[:3]
            for g in range(GROUPS):
                got = VoteStore(ROOT / f"g{g}", fs).load()  # raises StorageCorruption if torn
                assert got in (VoteState(term=1, voted_for=1), new_vote(g)), (seed, cut_at, g)
                outcomes.add((cut_at, got == new_vote(g)))
    # both outcomes were reached after the second cut (some renames survived, some not)
    assert {(2, True), (2, False), (1, False)} <= outcomes


async def test_renaming_before_the_tmp_files_are_durable_is_caught() -> None:
    """The planted fault: a writer that renames before the first sync. A power cut then
    finds damaged or empty records, which the test above would report."""

    class RenameFirst(RecordWriter):
        async def _write(self, batch) -> None:  # type: ignore[no-untyped-def]
            items = list(batch.items())  # path -> bytes (SaveBatches hands the newest)
            self._write_tmps(items)
            self._rename(items)
            await self._barrier()  # type: ignore[misc]

    damaged = 0
    for seed in range(20):
        fs = ModelFileSystem()
        stores = make_groups(fs)
        await save_all(RenameFirst(fs, counting_barrier(fs, [], 1, seed)), stores)
        for g in range(GROUPS):
            try:
                load_record(ROOT / f"g{g}" / "vote", b"RLVT", fs)
            except Exception:
                damaged += 1
    assert damaged > 0
