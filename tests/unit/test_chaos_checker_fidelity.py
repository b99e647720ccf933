"""The chaos checker's TTL rule (``bench/chaos_checker._fidelity``): the remaining TTL a handler sees is
never more than sent and never far less than what is left since the message was first tried.

The soak's one "TTL deviation" was a message handed 7.3 s before its HTTP answer reached the load thread
(the request was retried after the ingress was killed; its first try had been stored): elapsed time
counted from the acknowledgement was negative and the rule misfired."""

from __future__ import annotations

from typing import Any

from bench.chaos_checker import _fidelity


def sent(t_sent: float, t_ack: float, ttl: float = 3600.0) -> dict[str, Any]:
    return {"id": "m", "ttl": ttl, "sched": None, "props": {}, "t_sent": t_sent, "t_ack": t_ack}


def handed(t: float, ttl: float | None) -> dict[str, Any]:
    return {"id": "m", "t": t, "ttl": ttl, "props": {}}


def ttl_deviations(row: dict[str, Any], call: dict[str, Any]) -> int:
    return _fidelity({"m": [call]}, {"m": row})["ttl"]


def test_a_message_handed_before_its_acknowledgement_arrived_keeps_a_full_ttl() -> None:
    assert ttl_deviations(sent(100.0, 110.0), handed(102.7, 3600.0)) == 0


def test_more_ttl_than_sent_is_a_deviation() -> None:
    assert ttl_deviations(sent(100.0, 100.1), handed(101.0, 3600.5)) == 1


def test_a_ttl_far_below_what_is_left_is_a_deviation() -> None:
    assert ttl_deviations(sent(100.0, 100.1), handed(110.0, 3500.0)) == 1
    assert ttl_deviations(sent(100.0, 100.1), handed(110.0, 3591.0)) == 0


def test_a_missing_ttl_is_a_deviation() -> None:
    assert ttl_deviations(sent(100.0, 100.1), handed(101.0, None)) == 1
