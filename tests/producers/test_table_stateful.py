"""A hypothesis stateful test of the producer table against a simple model.

The model keeps every producer's whole history in plain lists (no cache, no
wrap-around: sequences and epochs stay small here) and decides outcomes the
obvious way. After every step the table must agree with it on outcomes, the
LSO, and what a fetch shows; and a snapshot must restore to an equal table.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from raftlog.producers.fetch_filter import visible_batches
from raftlog.producers.markers import make_marker
from raftlog.producers.outcomes import Accept, AlreadyWritten, Fenced, OlderDuplicate, OutOfOrder
from raftlog.producers.producer_table import ProducerTable
from raftlog.storage.batch import BatchKind
from tests.producers.builders import LogBuilder

PIDS = st.sampled_from([1, 2, 3])


@dataclasses.dataclass
class ModelProducer:
    epoch: int
    batches: list[tuple[int, int, int, int]] = dataclasses.field(default_factory=list)
    open_tx: int | None = None  # id of the open transaction
    open_records: int = 0
    version: int = -1


class TableMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.log = LogBuilder()
        self.table = ProducerTable()
        self.model: dict[int, ModelProducer] = {}
        self.tx_of: dict[int, int] = {}  # base offset of transactional data -> tx id
        self.tx_state: dict[int, str] = {}  # tx id -> open / committed / aborted
        self.tx_first: dict[int, int] = {}
        self.next_tx = 0

    # -- the model's decisions -------------------------------------------------

    def expected(self, pid: int, epoch: int, first: int, count: int):
        p = self.model.get(pid)
        if p is None:
            return Accept()
        if epoch < p.epoch:
            return Fenced(p.epoch, epoch)
        if epoch > p.epoch:
            return Accept() if first == 0 else OutOfOrder(0, first)
        last = first + count - 1
        for f, la, base, lo in p.batches[-5:]:
            if (f, la) == (first, last):
                return AlreadyWritten(base, lo)
        if not p.batches:
            return Accept() if first == 0 else OutOfOrder(0, first)
        prev_last = p.batches[-1][1]
        if first == prev_last + 1:
            return Accept()
        if last <= prev_last:
            return OlderDuplicate(prev_last)
        return OutOfOrder(prev_last + 1, first)

    def end_tx(self, p: ModelProducer, outcome: str) -> None:
        if p.open_tx is not None:
            self.tx_state[p.open_tx] = outcome
            p.open_tx = None
        p.open_records = 0

    def bump(self, pid: int, epoch: int) -> None:
        p = self.model.setdefault(pid, ModelProducer(epoch))
        if epoch > p.epoch:
            self.end_tx(p, "aborted")
            p.epoch = epoch
            p.batches = []

    # -- rules -------------------------------------------------------------------

    @rule(
        pid=PIDS,
        epoch_delta=st.sampled_from([0, 0, 0, -1, 1]),
        seq_kind=st.sampled_from(["next", "next", "next", "recent", "old", "gap", "zero"]),
        count=st.integers(1, 3),
        tx=st.booleans(),
    )
    def produce(self, pid: int, epoch_delta: int, seq_kind: str, count: int, tx: bool) -> None:
        p = self.model.get(pid)
        epoch = max(0, (p.epoch if p else 0) + epoch_delta)
        last = p.batches[-1][1] if p and p.batches else -1
        first = {
            "next": last + 1,
            "recent": p.batches[-1][0] if p and p.batches else 0,
            "old": p.batches[0][0] if p and p.batches else 0,
            "gap": last + 2,
            "zero": 0,
        }[seq_kind]
        if seq_kind in ("recent", "old") and p and p.batches:
            ref = p.batches[-1] if seq_kind == "recent" else p.batches[0]
            count = ref[1] - ref[0] + 1
        outcome = self.table.check(pid, epoch, first, count)
        assert outcome == self.expected(pid, epoch, first, count)
        if outcome != Accept():
            return
        batch = self.log.data(pid, epoch, first, count, tx=tx)
        self.table.apply(batch)
        self.bump(pid, epoch)
        p = self.model[pid]
        p.batches.append((first, first + count - 1, batch.base_offset, batch.last_offset))
        if tx:
            if p.open_tx is None:
                p.open_tx = self.next_tx
                self.tx_state[self.next_tx] = "open"
                self.tx_first[self.next_tx] = batch.base_offset
                self.next_tx += 1
            self.tx_of[batch.base_offset] = p.open_tx
            p.open_records += count

    @rule(
        pid=PIDS,
        commit=st.booleans(),
        version=st.integers(-1, 50),
        check=st.sampled_from(["none", "right", "right", "count", "sequence"]),
        bump=st.booleans(),
    )
    def end_transaction(self, pid: int, commit: bool, version: int, check: str, bump: bool) -> None:
        p = self.model.get(pid)
        if p is None:
            return
        if commit:
            # a checked commit names the open transaction's record count and last sequence;
            # one that names others must abort it (the table's deterministic rule)
            last = p.batches[-1][1] if p.batches else -1
            count, seq = {
                "none": (-1, -1),
                "right": (p.open_records, last),
                "count": (p.open_records + 1, last),
                "sequence": (p.open_records, last + 1),
            }[check]
            marker = make_marker(
                pid,
                p.epoch,
                commit=True,
                version=version,
                record_count=count,
                last_sequence=seq,
                requested_epoch=p.epoch,
                timestamp_ms=self.log.now_ms,
            )
            self.table.apply(self.log._place(marker))
            if check in ("count", "sequence"):
                self.end_tx(p, "aborted")
                return
            self.end_tx(p, "committed")
            if version != -1:
                p.version = version
        elif bump:  # as rm_stm writes an abort: at the next epoch
            epoch = p.epoch + 1
            marker = make_marker(
                pid, epoch, commit=False, requested_epoch=p.epoch, timestamp_ms=self.log.now_ms
            )
            self.table.apply(self.log._place(marker))
            self.bump(pid, epoch)
        else:  # as written before aborts bumped the epoch (old logs)
            self.table.apply(self.log.abort(pid, p.epoch))
            self.end_tx(p, "aborted")

    @rule(pid=PIDS)
    def init_producer(self, pid: int) -> None:
        p = self.model.get(pid)
        epoch = 0 if p is None else p.epoch + 1
        self.table.apply(self.log.fence(pid, epoch))
        self.bump(pid, epoch)

    @rule()
    def plain(self) -> None:
        self.table.apply(self.log.plain())

    # -- invariants --------------------------------------------------------------

    @invariant()
    def states_agree(self) -> None:
        for pid, p in self.model.items():
            state = self.table.get(pid)
            assert state is not None
            assert state.epoch == p.epoch
            assert state.last_sequence == (p.batches[-1][1] if p.batches else -1)
            assert state.last_committed_version == p.version
            assert (state.open_tx is None) == (p.open_tx is None)
            if state.open_tx is not None:
                assert state.open_tx.record_count == p.open_records

    @invariant()
    def lso_and_fetch_agree(self) -> None:
        open_firsts = [self.tx_first[t] for t, s in self.tx_state.items() if s == "open"]
        lso = min(open_firsts, default=self.log.next_offset)
        assert self.table.last_stable_offset() == lso
        seen = visible_batches(self.log.batches, lso, self.table.aborted)
        expected = [
            b
            for b in self.log.batches
            if b.last_offset < lso
            and b.kind is BatchKind.DATA
            and (not b.is_transactional or self.tx_state[self.tx_of[b.base_offset]] == "committed")
        ]
        assert seen == expected
        # never any aborted or open transaction's data below the LSO
        for b in seen:
            if b.is_transactional:
                assert self.tx_state[self.tx_of[b.base_offset]] == "committed"

    @invariant()
    def snapshot_restores_an_equal_table(self) -> None:
        restored = ProducerTable()
        restored.restore(self.table.snapshot())
        assert restored.producers() == self.table.producers()
        assert restored.aborted == self.table.aborted
        assert restored.snapshot() == self.table.snapshot()


TableMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_table_against_model = TableMachine.TestCase
