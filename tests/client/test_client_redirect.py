"""A partition call goes to the leader that an error names at once, and otherwise backs
off by at most 0.25 s, so that it sees a new leader soon after it is elected."""

from __future__ import annotations

from tenacity import RetryCallState

from raftlog.client.calls import FREE_REDIRECTS, CallState


def _retry_state(attempt: int) -> RetryCallState:
    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    return state


def test_a_named_new_leader_is_tried_at_once_a_few_times_per_call() -> None:
    call = CallState()
    late = _retry_state(30)  # deep into the call: the exponential backoff is at its cap
    for _ in range(FREE_REDIRECTS):
        call.redirected = True
        assert call.backoff(late) == 0.0
        assert not call.redirected
    call.redirected = True  # two stale nodes naming each other: no busy loop
    pauses = [call.backoff(late) for _ in range(200)]
    assert all(0.0 <= p <= 0.25 for p in pauses) and max(pauses) > 0.1


def test_without_a_hint_the_pause_is_capped_at_a_quarter_second() -> None:
    call = CallState()
    assert max(call.backoff(_retry_state(n)) for n in range(1, 40) for _ in range(20)) <= 0.25
    assert call.backoff(_retry_state(1)) <= 0.05 * 2
