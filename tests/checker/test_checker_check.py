"""The checker on hand-written histories: each anomaly is detected, a clean run passes."""

from __future__ import annotations

import itertools

import pytest

from raftlog.checker import History, check

TP = ("events", 0)


def fake_clock():
    """A deterministic monotonic clock: each call is one second after the previous."""
    ticks = itertools.count()
    return lambda: float(next(ticks))


def new_history() -> History:
    return History(clock=fake_clock())


def produce_ok(h: History, values, offset, *, producer=None, seq=None, process="w1", epoch=None):
    op = h.invoke_produce(process, *TP, values, producer=producer, first_sequence=seq, epoch=epoch)
    h.ok_produce(op, offset)
    return op


def read_ok(h: History, records, *, hwm=None, process="r1", from_offset=0):
    op = h.invoke_read(process, *TP, from_offset)
    h.ok_read(op, records, high_watermark=hwm)
    return op


def clean_history() -> tuple[History, dict]:
    h = new_history()
    produce_ok(h, ["p1-0", "p1-1"], 0, producer="p1", seq=0)
    produce_ok(h, ["p2-0"], 2, producer="p2", seq=0)
    produce_ok(h, ["p1-2"], 3, producer="p1", seq=2)
    read_ok(h, [(0, "p1-0"), (1, "p1-1")], hwm=2)
    read_ok(h, [(2, "p2-0"), (3, "p1-2")], hwm=4, from_offset=2)
    unk = h.invoke_produce("w2", *TP, ["u-0"])
    h.unknown(unk, "timeout")  # landed
    unk2 = h.invoke_produce("w2", *TP, ["u-1"])
    h.unknown(unk2, "connection reset")  # did not land
    failed = h.invoke_produce("w2", *TP, ["f-0"])
    h.fail(failed, "fenced")
    final = {TP: [(0, "p1-0"), (1, "p1-1"), (2, "p2-0"), (3, "p1-2"), (4, "u-0")]}
    return h, final


def test_clean_history_passes_and_counts_unknowns():
    h, final = clean_history()
    report = check(h, final)
    assert report.ok, report.render()
    assert report.counts() == {
        "operations": 8,
        "produce_ok": 3,
        "produce_failed": 1,
        "produce_unknown": 2,
        "reads": 2,
        "values_written": 7,
        "values_in_final_reads": 5,
        "unknown_landed": 1,
        "unknown_not_landed": 1,
        "lost": 0,
        "duplicated": 0,
        "inconsistent": 0,
        "failed_visible": 0,
        "order": 0,
        "nonmonotonic": 0,
    }
    assert report.render().startswith("checker: OK")


def test_acknowledged_write_missing_from_final_read_is_lost():
    h, final = clean_history()
    final[TP] = [r for r in final[TP] if r[1] != "p1-2"]
    report = check(h, final)
    assert not report.ok
    assert report.lost == 1
    (lost,) = report.anomalies["lost"]
    assert lost.value == "p1-2" and lost.tp == TP
    assert "acked by op 2 at offset 3" in lost.detail
    assert "lost 1" in report.render() and "'p1-2'" in report.render()


def test_value_seen_by_a_read_then_gone_is_lost():
    h = new_history()
    read_ok(h, [(0, "x")])  # e.g. a write of unknown outcome that a read saw
    unk = h.invoke_produce("w", *TP, ["x"])
    h.unknown(unk, "timeout")
    report = check(h, {TP: []})
    assert report.lost == 1
    assert report.anomalies["lost"][0].op_ids == (0,)


def test_missing_partition_makes_its_acked_values_lost():
    h = new_history()
    produce_ok(h, ["a"], 0)
    report = check(h, {})
    assert report.lost == 1
    assert "partition missing from the final reads" in report.anomalies["lost"][0].detail


def test_one_value_at_two_offsets_is_a_duplicate():
    h = new_history()
    produce_ok(h, ["a"], 0, producer="p", seq=0)
    report = check(h, {TP: [(0, "a"), (1, "a")]})
    assert report.duplicated == 1
    assert report.anomalies["duplicated"][0].value == "a"
    assert not report.ok


def test_two_values_at_one_offset_across_reads_is_inconsistent():
    h = new_history()
    produce_ok(h, ["a"], 0)
    read_ok(h, [(0, "a")])
    read_ok(h, [(0, "b")], process="r2")
    report = check(h, {TP: [(0, "a"), (1, "b")]})
    assert report.inconsistent >= 1
    kinds = [a.detail for a in report.anomalies["inconsistent"]]
    assert any("offset 0 holds 2 different values" in d for d in kinds), kinds
    assert not report.ok


def test_ack_offset_holding_another_value_is_inconsistent():
    h = new_history()
    produce_ok(h, ["a"], 0)
    produce_ok(h, ["b"], 0)  # the server acked two writes at offset 0
    report = check(h, {TP: [(0, "a"), (1, "b")]})
    details = [a.detail for a in report.anomalies["inconsistent"]]
    assert any("offset 0 holds 2 different values" in d and "acked by op 1" in d for d in details)
    # b also moved: acked at 0, final at 1
    assert any("seen at 2 offsets" in d for d in details)
    assert report.lost == 0 and not report.ok


def test_failed_write_that_became_visible():
    h = new_history()
    op = h.invoke_produce("w", *TP, ["f"])
    h.fail(op, "out of order sequence")
    report = check(h, {TP: [(0, "f")]})
    assert report.failed_visible == 1
    assert "out of order sequence" in report.anomalies["failed_visible"][0].detail
    assert not report.ok


def test_failed_then_retried_ok_is_not_failed_visible():
    h = new_history()
    op = h.invoke_produce("w", *TP, ["f"])
    h.fail(op, "not leader")
    produce_ok(h, ["f"], 0)
    assert check(h, {TP: [(0, "f")]}).ok


def test_nonmonotonic_reads_are_reported_but_informational():
    h = new_history()
    produce_ok(h, ["a", "b"], 0)
    read_ok(h, [(0, "a"), (1, "b")], hwm=2)
    read_ok(h, [(0, "a")], hwm=1)  # the same reader's high watermark went back
    read_ok(h, [(1, "b"), (0, "a")], process="r2")  # offsets go back inside one read
    report = check(h, {TP: [(0, "a"), (1, "b")]})
    assert report.nonmonotonic == 2
    details = [a.detail for a in report.anomalies["nonmonotonic"]]
    assert any("high watermark went back from 2 to 1" in d for d in details)
    assert any("offset 0 follows offset 1" in d for d in details)
    assert report.ok  # see FATAL_KINDS: a new leader's hwm may briefly lag


def test_concurrent_reads_of_one_process_are_not_ordered():
    h = new_history()
    first = h.invoke_read("r", *TP, 0)
    second = h.invoke_read("r", *TP, 0)  # invoked before the first completed
    h.ok_read(first, [], high_watermark=5)
    h.ok_read(second, [], high_watermark=3)
    assert check(h, {TP: []}).nonmonotonic == 0


def test_producer_values_out_of_sequence_order():
    h = new_history()
    produce_ok(h, ["p-0"], 1, producer="p", seq=0)
    produce_ok(h, ["p-1"], 0, producer="p", seq=1)
    report = check(h, {TP: [(0, "p-1"), (1, "p-0")]})
    assert report.order_violations == 1
    (v,) = report.anomalies["order"]
    assert v.value == "p-0" and "producer 'p'" in v.detail
    assert not report.ok


def test_new_epoch_may_restart_sequences():
    h = new_history()
    produce_ok(h, ["e0-5"], 0, producer="p", seq=5, epoch=0)
    produce_ok(h, ["e1-0"], 1, producer="p", seq=0, epoch=1)
    assert check(h, {TP: [(0, "e0-5"), (1, "e1-0")]}).ok


def test_unknown_write_landing_in_part_is_inconsistent():
    h = new_history()
    op = h.invoke_produce("w", *TP, ["a", "b"])
    h.unknown(op, "timeout")
    report = check(h, {TP: [(0, "a")]})
    assert report.inconsistent == 1
    assert "landed in part" in report.anomalies["inconsistent"][0].detail


def test_pending_operation_counts_as_unknown():
    h = new_history()
    h.invoke_produce("w", *TP, ["a"])  # never completed: the run stopped
    report = check(h, {TP: [(0, "a")]})
    assert report.produce_unknown == 1 and report.unknown_landed == 1 and report.ok


def test_final_reads_recorded_in_history_are_the_default():
    h = new_history()
    produce_ok(h, ["a"], 0)
    h.record_final_read(*TP, [(0, "a")])
    assert check(h).ok
    h2 = new_history()
    produce_ok(h2, ["a"], 0)
    h2.record_final_read(*TP, [])
    assert check(h2).lost == 1


@pytest.mark.parametrize(
    ("finals", "needle"),
    [
        ([("events", 0)], "final_reads must be a dict"),
        ({"events": []}, "final_reads key must be (topic: str, partition: int)"),
        ({TP: [(0, b"bytes")]}, "final_reads[('events', 0)][0] must be (offset: int, value: str)"),
        ({TP: [(0,)]}, "final_reads[('events', 0)][0]"),
    ],
)
def test_malformed_final_reads_are_named(finals, needle):
    with pytest.raises(ValueError) as exc:
        check(new_history(), finals)
    assert needle in str(exc.value)


def test_render_caps_examples():
    h = new_history()
    for i in range(5):
        produce_ok(h, [f"v{i}"], i)
    text = check(h, {TP: []}).render(max_examples=2)
    assert text.startswith("checker: FAILED")
    assert "lost 5" in text and "... and 3 more lost" in text
