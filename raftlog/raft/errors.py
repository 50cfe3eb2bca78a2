"""Errors raised by the replicate pipeline and the consensus API."""

from __future__ import annotations

from raftlog import errors


class RaftError(Exception):
    """Base of every error raised by :mod:`raftlog.raft`."""


class NotLeaderError(RaftError, errors.NotLeaderError):
    """This node is not the group's leader (or is transferring leadership).

    The wire's NotLeaderError (code NOT_LEADER) raised by a group, which it names.
    ``leader_id`` is the leader this node knows of, ``-1`` when unknown; a
    client retries there.
    """

    def __init__(self, group: int, leader_id: int, message: str = "") -> None:
        errors.NotLeaderError.__init__(
            self,
            message or f"group {group}: this node is not the leader (known leader: {leader_id})",
            leader_id=leader_id,
        )
        self.group = group


class LeadershipLostError(NotLeaderError):
    """The entry was appended but leadership was lost before it was known committed.

    The outcome is uncertain: the entry may or may not survive. The next
    leader's log says which (what rm_stm resolves after stepping down).
    """


class TermMismatchError(RaftError):
    """``expected_term`` was given and is not the current term; nothing was appended."""

    def __init__(self, group: int, expected_term: int, current_term: int) -> None:
        super().__init__(
            f"group {group}: expected term {expected_term} but the current term is {current_term}"
        )
        self.group = group
        self.expected_term = expected_term
        self.current_term = current_term


class ConfigurationChangeError(RaftError):
    """A membership change was refused (one already in flight, unknown node, ...)."""


class TransportError(RaftError):
    """A peer could not be reached or did not answer in time."""


class PeerRefused(TransportError):
    """The peer's address refused the connection: no process listens there (it was
    killed or stopped), as opposed to a peer that is slow, hung or cut off, whose
    requests time out. Node liveness counts a refused peer's silence on the clock
    (:mod:`raftlog.raft.heartbeat_manager`)."""


class ReadNotReadyError(RaftError):
    """A linearizable read cannot be served here yet: the leader has not committed an
    entry of its term, is transferring, has not heard from a quorum lately, or its state
    machines have not applied the read index; the message says which. Retriable."""


class ReadBarrierTimeout(ReadNotReadyError, TimeoutError):
    """:meth:`Consensus.read_barrier` waited its whole bound for a read to become
    possible (the message says what was still missing). Retriable."""
