"""History recording: validation, completion rules, JSONL round trips, concurrent appends."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from raftlog.checker import History, OpKind, Outcome, check, load_history

TP = ("events", 3)


def test_invoke_and_complete_record_times_and_results():
    ticks = iter([0.0, 1.0, 2.5, 4.0, 7.0])
    h = History(clock=lambda: next(ticks))
    op = h.invoke_produce("w1", *TP, ["a", "b"], producer="p", first_sequence=4, epoch=2)
    h.ok_produce(op, 10)
    rd = h.invoke_read("r1", *TP, 10)
    h.ok_read(rd, [(10, "a"), (11, "b")], high_watermark=12)
    produce, read = h.operations
    assert (produce.kind, produce.outcome, produce.offset) == (OpKind.PRODUCE, Outcome.OK, 10)
    assert (produce.invoke_time, produce.complete_time) == (1.0, 2.5)
    assert (produce.producer, produce.epoch, produce.first_sequence) == ("p", 2, 4)
    assert read.records == ((10, "a"), (11, "b")) and read.high_watermark == 12
    assert read.tp == TP


def test_completion_rules():
    h = History()
    op = h.invoke_produce("w", *TP, ["a"])
    with pytest.raises(ValueError, match="is a produce, not a read"):
        h.ok_read(op, [])
    h.unknown(op, "timeout")
    with pytest.raises(ValueError, match="already completed as unknown"):
        h.ok_produce(op, 0)
    with pytest.raises(ValueError, match="op_id 99 was never invoked"):
        h.fail(99, "x")


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda h: h.invoke_produce("w", *TP, []), "values must hold at least one value"),
        (lambda h: h.invoke_produce("w", *TP, [b"x"]), "values[0] must be a non-empty str"),
        (lambda h: h.invoke_produce("", *TP, ["x"]), "process must be a non-empty str"),
        (lambda h: h.invoke_produce("w", "t", -1, ["x"]), "partition must be an int >= 0"),
        (
            lambda h: h.invoke_produce("w", *TP, ["x"], producer="p"),
            "producer and first_sequence must be given together",
        ),
        (lambda h: h.invoke_read("r", *TP, -2), "from_offset must be an int >= 0"),
        (lambda h: h.ok_produce(h.invoke_produce("w", *TP, ["x"]), -1), "offset must be an int"),
        (lambda h: h.ok_read(h.invoke_read("r", *TP, 0), [(0, 1)]), "records[0] value"),
    ],
)
def test_bad_input_names_the_field(call, needle):
    with pytest.raises(ValueError) as exc:
        call(History())
    assert needle in str(exc.value)


def build(h: History) -> None:
    a = h.invoke_produce("w", *TP, ["a"], producer="p", first_sequence=0, epoch=1)
    h.ok_produce(a, 0)
    b = h.invoke_produce("w", *TP, ["b"])
    h.unknown(b, "timeout")
    c = h.invoke_produce("w", *TP, ["c"])
    h.fail(c, "fenced")
    r = h.invoke_read("r", *TP, 0)
    h.ok_read(r, [(0, "a")], high_watermark=1)
    h.invoke_read("r", *TP, 1)  # pending
    h.record_final_read(*TP, [(0, "a"), (1, "b")])


def test_streamed_and_saved_jsonl_round_trip(tmp_path):
    streamed = tmp_path / "streamed.jsonl"
    with History(streamed) as h:
        build(h)
    saved = tmp_path / "saved.jsonl"
    h.save(saved)
    for path in (streamed, saved):
        back = load_history(path)
        assert back.operations == h.operations
        assert back.final_reads == h.final_reads
        assert check(back).counts() == check(h).counts()
    # the replayed history keeps numbering after the last op
    assert load_history(saved).invoke_read("r", *TP, 0) == 5


def test_torn_last_line_is_ignored_but_bad_middle_line_is_named(tmp_path):
    path = tmp_path / "h.jsonl"
    with History(path) as h:
        build(h)
    text = path.read_text()
    path.write_text(text + '{"event": "inv')  # killed mid-write
    assert load_history(path).operations == h.operations
    lines = text.splitlines()
    lines.insert(1, "not json")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"h\.jsonl:2: not valid JSON"):
        load_history(path)
    path.write_text(json.dumps({"event": "complete", "op_id": 7}) + "\n")
    with pytest.raises(ValueError, match=r"h\.jsonl:1: not a history event"):
        load_history(path)


def test_an_ok_produce_without_its_offset_is_named_when_loaded(tmp_path):
    """The checker places an ok produce's values at offset + i: a history whose ok
    produce has no offset is refused when loaded (it once failed inside check with
    'unsupported operand type(s) for +: NoneType and int')."""
    path = tmp_path / "h.jsonl"
    with History(path) as h:
        h.ok_produce(h.invoke_produce("w1", *TP, ["a"]), 5)
    invoke, complete = (json.loads(line) for line in path.read_text().splitlines())
    assert complete["offset"] == 5
    del complete["offset"]
    path.write_text(json.dumps(invoke) + "\n" + json.dumps(complete) + "\n")
    with pytest.raises(ValueError, match=r"h\.jsonl:2: .*offset must be an int >= 0, got None"):
        check(load_history(path))


def test_concurrent_appends_from_threads_and_tasks(tmp_path):
    path = tmp_path / "h.jsonl"
    h = History(path)
    per_worker = 200

    def thread_worker(n: int) -> None:
        for i in range(per_worker):
            op = h.invoke_produce(f"t{n}", *TP, [f"t{n}-{i}"])
            h.ok_produce(op, i)

    async def task_worker(n: int) -> None:
        for i in range(per_worker):
            op = h.invoke_produce(f"a{n}", *TP, [f"a{n}-{i}"])
            await asyncio.sleep(0)
            h.unknown(op, "timeout")

    async def tasks() -> None:
        await asyncio.gather(*(task_worker(n) for n in range(4)))

    threads = [threading.Thread(target=thread_worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    asyncio.run(tasks())
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    h.close()
    ops = h.operations
    assert [op.op_id for op in ops] == list(range(8 * per_worker))
    assert all(op.outcome is not Outcome.PENDING for op in ops)
    assert load_history(path).operations == ops
