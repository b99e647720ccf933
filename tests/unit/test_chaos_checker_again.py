"""The chaos checker's rule for ids handed more than once (``bench/chaos_checker.handed_again``).

A call that overlaps another call of the same id is a violation whatever faults were on; a later call after
its predecessor's receiver process was killed inside the crash window is counted apart and bounded by what
the kills can bring back; any other later call is handed twice (Redis faults excuse nothing any more: the
done mark and the in-flight mark survive them).
"""

from __future__ import annotations

from typing import Any

from bench.chaos_checker import CRASH_WINDOW, IN_HAND_PER_KILL, handed_again


def call(pid: int, t: float, end: float | None = None, message_id: str = "m") -> dict[str, Any]:
    """One handler call as ``bench/chaos_handler.py`` records it (``end`` absent in older run folders)."""
    row: dict[str, Any] = {"id": message_id, "pid": pid, "t": t}
    if end is not None:
        row["end"] = end
    return row


def judge(rows: list[dict[str, Any]], kills: list[dict[str, Any]] | None = None) -> tuple[int, int, int, int]:
    calls: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        calls.setdefault(row["id"], []).append(row)
    again = handed_again(calls, kills or [])
    return len(again.twice), len(again.concurrent), len(again.after_crash), again.crash_bound


def test_one_call_per_id_is_nothing_to_report() -> None:
    assert judge([call(1, 10.0, 10.1), call(1, 11.0, 11.1, "n")]) == (0, 0, 0, 0)


def test_a_call_overlapping_another_of_the_same_id_is_concurrent_even_in_the_crash_window() -> None:
    # Given the first call's process killed 2 s after it started, but the second call began before the
    # first one ended: never excused
    kills = [{"pid": 1, "t": 12.0}]
    assert judge([call(1, 10.0, 40.0), call(2, 37.0, 77.0)], kills) == (1, 1, 0, 1)
    # The order the records come in does not matter
    assert judge([call(2, 37.0, 77.0), call(1, 10.0, 40.0)], kills) == (1, 1, 0, 1)


def test_a_call_overlapping_any_earlier_call_is_concurrent_not_only_the_one_just_before() -> None:
    rows = [call(1, 0.0, 10.0), call(2, 1.0, 2.0), call(3, 5.0, 6.0)]
    assert judge(rows, [{"pid": 2, "t": 3.0}]) == (1, 1, 0, 1)


def test_a_later_call_after_a_kill_inside_the_window_is_the_crash_window_and_bounded() -> None:
    kills = [{"pid": 1, "t": 10.0 + CRASH_WINDOW - 0.5}]
    assert judge([call(1, 10.0, 10.01), call(2, 30.0, 30.01)], kills) == (0, 0, 1, 1)
    # Records written before ``end`` existed last no time
    assert judge([call(1, 10.0), call(2, 30.0)], kills) == (0, 0, 1, 1)


def test_a_later_call_after_a_kill_outside_the_window_or_of_another_process_is_handed_twice() -> None:
    assert judge([call(1, 10.0, 10.01), call(2, 30.0)], [{"pid": 1, "t": 10.0 + CRASH_WINDOW + 1}]) == (
        1, 0, 0, 0,
    )  # fmt: skip
    assert judge([call(1, 10.0, 10.01), call(2, 30.0)], [{"pid": 3, "t": 11.0}]) == (1, 0, 0, 0)
    # A Redis fault excuses nothing
    assert judge([call(1, 10.0, 10.01), call(2, 30.0)]) == (1, 0, 0, 0)


def test_each_kill_excuses_one_more_call_per_id() -> None:
    kills = [{"pid": 1, "t": 11.0}]
    assert judge([call(1, 10.0, 10.01), call(2, 30.0, 30.01), call(3, 50.0, 50.01)], kills) == (1, 0, 0, 1)
    kills.append({"pid": 2, "t": 31.0})
    assert judge([call(1, 10.0, 10.01), call(2, 30.0, 30.01), call(3, 50.0, 50.01)], kills) == (0, 0, 1, 2)


def test_the_crash_bound_counts_what_each_killed_process_handed_just_before_its_kill_capped() -> None:
    rows = [call(1, 100.0 - i * 0.001, message_id=f"m{i}") for i in range(IN_HAND_PER_KILL + 50)]
    rows += [call(1, 90.0, message_id="early"), call(2, 99.0, message_id="other-process")]
    assert judge(rows, [{"pid": 1, "t": 100.5}])[3] == IN_HAND_PER_KILL
    assert judge(rows[:3], [{"pid": 1, "t": 100.5}])[3] == 3
