"""Property test: random operations on SegmentedLog and MemoryLog against a plain model."""

from __future__ import annotations

import pathlib
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import make_batches

from raftlog.storage.log import SegmentedLog
from raftlog.storage.memory import MemoryLog

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"), st.lists(st.integers(0, 90), min_size=1, max_size=4), st.booleans()
        ),
        st.tuples(st.just("flush")),
        st.tuples(st.just("read"), st.floats(0, 1), st.integers(1, 400)),
        st.tuples(st.just("truncate"), st.floats(0, 1)),
        st.tuples(st.just("prefix_truncate"), st.floats(0, 1)),
        st.tuples(st.just("reopen")),
    ),
    max_size=25,
)


def pick(model: list, fraction: float):
    return model[min(int(fraction * len(model)), len(model) - 1)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops)
def test_segmented_and_memory_logs_match_the_model(ops):
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp)

        def reopen() -> SegmentedLog:
            return SegmentedLog.open(path, segment_bytes=300, index_interval_bytes=64)

        disk, memory = reopen(), MemoryLog()
        model: list = []  # every batch still in the log (from offset 0), for terms and content
        term = 1
        flushed = -1  # the flushed offset as flush/truncate/reopen move it
        try:
            for op in ops:
                if op[0] == "append":
                    term += op[2]
                    run = make_batches(disk.dirty_offset + 1, term, op[1])
                    assert disk.append(run) == memory.append(run) == run[-1].last_offset
                    model += run
                elif op[0] == "flush":
                    assert disk.flush() == memory.flush() == disk.dirty_offset
                    flushed = disk.dirty_offset
                elif op[0] == "read" and model:
                    start = max(disk.start_offset, memory.start_offset)
                    live = [b for b in model if b.last_offset >= start]
                    if live:
                        offset = pick(live, op[1]).last_offset
                        got = disk.read(offset, op[2])
                        assert got == memory.read(offset, op[2])
                        assert got[0].base_offset <= offset <= got[0].last_offset
                        assert got == live[live.index(got[0]) :][: len(got)]
                        assert len(got) == 1 or sum(b.size_bytes for b in got) <= op[2]
                elif op[0] == "truncate" and model:
                    start = max(disk.start_offset, memory.start_offset)
                    live = [b for b in model if b.base_offset >= start]
                    if live:
                        at = pick(live, op[1]).base_offset
                        disk.truncate(at)
                        memory.truncate(at)
                        model = [b for b in model if b.base_offset < at]
                        flushed = min(flushed, at - 1)
                elif op[0] == "prefix_truncate" and model:
                    at = min(int(op[1] * (disk.dirty_offset + 2)), disk.dirty_offset + 1)
                    disk.prefix_truncate(at)
                    memory.prefix_truncate(at)
                elif op[0] == "reopen":
                    disk.close()
                    disk = reopen()
                    memory.flush()  # a clean reopen: what was written is kept and durable
                    flushed = disk.dirty_offset
                    assert disk.recovery_report.warnings == ()
                # the shared contract after every step
                assert disk.dirty_offset == memory.dirty_offset
                assert disk.last_term == memory.last_term
                # A roll seals (fsyncs) the previous segment: the disk log's flushed offset
                # covers every sealed segment, so it may run ahead of the explicit flushes.
                bases = sorted(int(f.name.split("-")[0]) for f in path.glob("*.log"))
                if bases:
                    assert disk.flushed_offset >= bases[-1] - 1
                for log in (disk, memory):
                    # prefix truncation (at each log's own grain) lifts flushed to start - 1
                    floor = max(flushed, log.start_offset - 1)
                    if log is memory:
                        assert log.flushed_offset == floor
                    else:
                        assert floor <= log.flushed_offset <= log.dirty_offset
                    end = model[-1].last_offset if model else log.start_offset - 1
                    assert log.dirty_offset == end
                    if log.start_offset > 0:
                        assert log.term_at(log.start_offset - 1) == next(
                            b.term for b in model if b.last_offset == log.start_offset - 1
                        )
                    kept = [b for b in model if b.base_offset >= log.start_offset]
                    if kept:
                        assert log.read(log.start_offset, 10**9) == kept
                        assert log.term_at(kept[-1].last_offset) == kept[-1].term
                    assert log.term_at(log.dirty_offset + 1) is None
        finally:
            disk.close()
