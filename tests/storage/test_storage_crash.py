"""Crash and corruption cases: torn tails are cut with a warning, older damage is an error."""

from __future__ import annotations

import logging
import os
import pathlib
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import cut_file, flip_byte, make_batches, segment_files

from raftlog.storage.api import StorageCorruption
from raftlog.storage.batch import CorruptBatch
from raftlog.storage.log import SegmentedLog
from raftlog.storage.memory import MemoryLog
from raftlog.storage.offset_index import ENTRY, read_index_file

SEGMENT_BYTES = 600
INTERVAL = 100


def open_log(path: pathlib.Path) -> SegmentedLog:
    return SegmentedLog.open(path, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)


def write_log(path: pathlib.Path, sizes: list[int], *, two_terms: bool = True) -> list:
    """A flushed log (of two terms unless told otherwise); returns its batches."""
    half = len(sizes) // 2 if two_terms else len(sizes)
    batches = make_batches(0, 1, sizes[:half])
    batches += make_batches(2 * half, 2, sizes[half:])
    with open_log(path) as log:
        log.append(batches)
        log.flush()
    return batches


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 150), min_size=2, max_size=12),
    cut_fraction=st.floats(0, 1, exclude_max=True),
)
def test_cut_last_segment_at_any_byte_keeps_whole_batches(sizes, cut_fraction):
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp)
        batches = write_log(path, sizes)
        last = segment_files(path)[-1]
        cut = int(os.path.getsize(last) * cut_fraction)
        cut_file(last, cut)
        with open_log(path) as log:
            survivors = log.read(0, 10**9) if log.dirty_offset >= 0 else []
            assert survivors == batches[: len(survivors)]
            # every batch that lay wholly before the cut survived, nothing else did
            base = int(last.name.split("-")[0])
            in_last = [b for b in batches if b.base_offset >= base]
            kept, pos = 0, 0
            for b in in_last:
                if pos + b.size_bytes > cut:
                    break
                pos += b.size_bytes
                kept += 1
            assert len(survivors) == len(batches) - len(in_last) + kept
            assert log.flushed_offset == log.dirty_offset
            report = log.recovery_report
            if pos < cut:  # a torn batch was cut off
                assert report.truncated_position == pos
                assert (
                    f"{last}: truncating torn or corrupt tail at position {pos}"
                    in (report.warnings[0])
                )
            elif kept > 0:
                assert report.warnings == ()


def test_torn_tail_warning_names_file_position_and_offset(tmp_path, caplog):
    batches = write_log(
        tmp_path, [40] * 4, two_terms=False
    )  # one segment, 92-byte batches, offsets 0..7
    seg = segment_files(tmp_path)[-1]
    cut_file(seg, 3 * 92 + 10)
    with caplog.at_level(logging.WARNING), open_log(tmp_path) as log:
        assert log.read(0, 10**6) == batches[:3]
        assert log.dirty_offset == 5
    assert f"{seg}: truncating torn or corrupt tail at position 276 (offset 6)" in caplog.text
    assert os.path.getsize(seg) == 276


def test_garbage_after_last_batch_is_cut(tmp_path, caplog):
    batches = write_log(tmp_path, [40] * 4, two_terms=False)
    seg = segment_files(tmp_path)[-1]
    with open(seg, "ab") as f:
        f.write(b"\x00garbage" * 20)
    with caplog.at_level(logging.WARNING), open_log(tmp_path) as log:
        assert log.read(0, 10**6) == batches
        assert log.recovery_report.truncated_bytes == 160
    assert f"{seg}: truncating torn or corrupt tail at position 368 (offset 8)" in caplog.text


def test_crc_error_in_tail_is_cut(tmp_path, caplog):
    batches = write_log(tmp_path, [40] * 4, two_terms=False)
    seg = segment_files(tmp_path)[-1]
    flip_byte(seg, 3 * 92 + 60)
    with caplog.at_level(logging.WARNING), open_log(tmp_path) as log:
        assert log.read(0, 10**6) == batches[:3]
    assert "CRC mismatch" in caplog.text
    assert f"{seg}: truncating torn or corrupt tail at position 276 (offset 6)" in caplog.text


def test_corruption_in_older_segment_is_an_error_naming_file_and_position(tmp_path):
    write_log(tmp_path, [100] * 10)  # 152-byte batches, three per segment
    older = segment_files(tmp_path)[0]
    flip_byte(older, 152 + 70)  # inside the second batch
    with open_log(tmp_path) as log:  # open checks only first and last batches of sealed ones
        with pytest.raises(StorageCorruption, match=f"{older}: invalid batch at position 152"):
            log.read(0, 10**6)
        assert log.read(0, 1)[0].base_offset == 0


def test_a_clients_fetch_read_leaves_the_crc_to_its_reader(tmp_path):
    """read(verify=False), a client's fetch: the damaged batch comes back as stored
    (its encoded form the bytes on disk, so it is sent on with its old CRC) and its
    reader's check_crc refuses it; every other read still fails at it."""
    batches = write_log(tmp_path, [100] * 10)  # 152-byte batches, three per segment
    older = segment_files(tmp_path)[0]
    flip_byte(older, 152 + 70)  # inside the second batch's payload
    with open_log(tmp_path) as log:
        got = log.read(0, 10**6, 4, verify=False)
        assert [b.base_offset for b in got] == [0, 2, 4]
        assert got[1].payload != batches[1].payload  # as stored: damaged, not repaired
        got[0].check_crc()
        got[2].check_crc()
        with pytest.raises(CorruptBatch, match=r"CRC mismatch in batch at base offset 2"):
            got[1].check_crc()
        assert bytes(got[1].encode()) == (older.read_bytes()[152:304])
        with pytest.raises(StorageCorruption, match=f"{older}: invalid batch at position 152"):
            log.read(0, 10**6, 4)


def test_damaged_payload_of_sealed_segment_is_found_where_it_is_read(tmp_path):
    """Open checks a sealed segment's structure from its headers, not its payloads'
    CRCs (as Kafka and Redpanda): a flipped payload byte in its last batch opens, and
    the read of that batch fails naming the file, the position and the CRC."""
    batches = write_log(tmp_path, [150] * 10)  # 202-byte batches, two per segment
    older = segment_files(tmp_path)[0]
    size = os.path.getsize(older)
    flip_byte(older, size - 5)
    with open_log(tmp_path) as log:
        assert log.dirty_offset == batches[-1].last_offset
        assert log.read(0, 1) == batches[:1]
        with pytest.raises(StorageCorruption, match="CRC mismatch") as err:
            log.read(0, 10**6)
        assert (err.value.path, err.value.position) == (str(older), size - 202)
        assert log.read(batches[2].base_offset, 10**6) == batches[2:]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("cut 5 bytes", "its 202 bytes end at byte 404, past the end of the data at byte 399"),
        ("cut a whole batch", r"last entry \(offset 2 -> position 202\) lies outside"),
        ("last header's base offset", "has base offset 253 and term 1, expected base offset 2 "),
        ("last header's term", "has base offset 2 and term 254, expected base offset 2 and "),
        ("first header's record count, sign", "corrupt batch header at position 0: record_c"),
        ("first header's record count", r"first batch \(offsets 0..252, 202 bytes\) overlaps"),
        ("first header's payload length", "its 65482 bytes end at byte 65482, past the end"),
    ],
)
def test_damaged_structure_of_sealed_segment_fails_open(tmp_path, damage, message):
    """What the header walk finds at open: a sealed segment cut short, a batch gone,
    a header overwritten. Each fails the open naming the file (the node then sets
    the log aside and fetches the group again)."""
    write_log(tmp_path, [150] * 10)  # 202-byte batches, two per segment
    older = segment_files(tmp_path)[0]
    size = os.path.getsize(older)
    assert size == 404
    if damage == "cut 5 bytes":
        cut_file(older, size - 5)
    elif damage == "cut a whole batch":
        cut_file(older, 202)
    else:
        # Header bytes (XOR 0xFF): base_offset at 4, record_count at 12, term at 16,
        # payload_len at 48, little-endian; the second batch starts at 202.
        position = {
            "last header's base offset": 202 + 4,  # 2 -> 253
            "last header's term": 202 + 16,  # 1 -> 254
            "first header's record count, sign": 15,  # 2 -> negative
            "first header's record count": 12,  # 2 -> 253
            "first header's payload length": 49,  # 150 -> 65,430
        }[damage]
        flip_byte(older, position)
    with pytest.raises(StorageCorruption, match=message) as err:
        open_log(tmp_path)
    assert pathlib.Path(err.value.path).stem == older.stem  # the segment, or its index
    assert err.value.path in str(err.value)


def test_index_pointing_at_garbage_is_an_error(tmp_path):
    write_log(tmp_path, [100] * 10)  # 152-byte batches, three per segment
    older = segment_files(tmp_path)[0]
    index = older.with_suffix(".index")
    entries = read_index_file(index)
    assert entries == [(2, 152), (4, 304)]
    index.write_bytes(ENTRY.pack(2, 159) + ENTRY.pack(4, 304))  # first entry off by 7 bytes
    with open_log(tmp_path) as log:
        with pytest.raises(StorageCorruption, match="points at garbage") as err:
            log.read(2, 10)
        assert (err.value.path, err.value.position) == (str(older), 159)
    index.write_bytes(ENTRY.pack(2, 152) + ENTRY.pack(4, 311))  # the last entry is checked on open
    with pytest.raises(StorageCorruption, match="points at garbage") as err:
        open_log(tmp_path)
    assert (err.value.path, err.value.position) == (str(older), 311)


def test_interrupted_prefix_truncation_is_finished_on_open(tmp_path):
    batches = write_log(tmp_path, [150] * 10)
    saved = tmp_path / "saved"
    saved.mkdir()
    first = segment_files(tmp_path)[0]
    shutil.copy(first, saved / first.name)
    with open_log(tmp_path) as log:
        log.prefix_truncate(4)
        start = log.start_offset
    shutil.copy(saved / first.name, first)  # the crash came before the delete was durable
    with open_log(tmp_path) as log:
        assert log.start_offset == start
        assert not first.exists()
        assert log.read(start, 10**6) == [b for b in batches if b.base_offset >= start]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(st.lists(st.integers(0, 120), min_size=1, max_size=4), st.booleans()),
        min_size=1,
        max_size=10,
    )
)
def test_losing_unflushed_data_recovers_the_flushed_prefix(steps):
    """Simulate a crash: every file goes back to its size at its last fsync (a flush, or
    the seal when the log rolled past it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp)
        memory = MemoryLog()
        durable: dict[str, int] = {}
        term = 1
        with open_log(path) as log:
            for sizes, flush in steps:
                term += len(sizes) % 2  # sometimes a new term, hence a roll
                batch_run = make_batches(log.dirty_offset + 1, term, sizes)
                log.append(batch_run)
                memory.append(batch_run)
                files = sorted(path.glob("*.log"))
                sealed = files if flush else files[:-1]
                if flush:
                    log.flush()
                durable.update({p.name: p.stat().st_size for p in sealed})
                assert log.flushed_offset >= int(files[-1].name.split("-")[0]) - 1
            expected_dirty = log.flushed_offset
        if memory.dirty_offset > expected_dirty:
            memory.truncate(expected_dirty + 1)
        for seg in path.glob("*.log"):
            if seg.name in durable:
                cut_file(seg, durable[seg.name])
            else:
                seg.unlink()
        with open_log(path) as log:
            assert log.dirty_offset == expected_dirty == memory.dirty_offset
            got = log.read(0, 10**9) if log.dirty_offset >= 0 else []
            assert got == memory.read(0, 10**9)
            assert log.last_term == memory.last_term
