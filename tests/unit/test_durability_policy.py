"""The durability policy's confirmation command and verdict (``bridge.core.durability``), as a table."""

from __future__ import annotations

import pytest

from bridge.core.durability import LOCAL, DurabilityPolicy, Reached, Shortfall, verdict

REPLICATED = DurabilityPolicy("replicated", replicas=2, timeout_ms=500)
WAITING = DurabilityPolicy("local", replicas=1, timeout_ms=500)


@pytest.mark.parametrize(
    ("policy", "reply", "expected"),
    [
        (DurabilityPolicy(), None, LOCAL),
        (WAITING, 1, Reached("local", 1)),
        (WAITING, 2, Reached("local", 2)),
        (WAITING, 0, Shortfall("local", 1, 0, local_fsync=True)),
        (REPLICATED, [1, 2], Reached("replicated", 2)),
        (REPLICATED, [1, 3], Reached("replicated", 3)),
        (REPLICATED, [1, 1], Shortfall("replicated", 2, 1, local_fsync=True)),
        (REPLICATED, [0, 2], Shortfall("replicated", 2, 2, local_fsync=False)),
        (
            REPLICATED,
            ValueError("ERR unknown command 'WAITAOF'"),
            Shortfall("replicated", 2, 0, local_fsync=False, reason="ERR unknown command 'WAITAOF'"),
        ),
        # a reply of the wrong shape confirms nothing, not even the primary's fsync
        (REPLICATED, None, Shortfall("replicated", 2, 0, local_fsync=False)),
        (WAITING, None, Shortfall("local", 1, 0, local_fsync=True)),
        # WAIT's count as the server may send it
        (WAITING, b"1", Reached("local", 1)),
        (WAITING, "0", Shortfall("local", 1, 0, local_fsync=True)),
        # a long refusal is cut to 200 characters
        (WAITING, ValueError("E" * 300), Shortfall("local", 1, 0, local_fsync=False, reason="E" * 200)),
    ],
)
def test_verdict(policy: DurabilityPolicy, reply: object, expected: object) -> None:
    assert verdict(policy, reply) == expected


def test_commands_and_rounds() -> None:
    # replicated: WAIT first, then WAITAOF, sharing the round's timeout; never a 0 (it blocks for ever)
    assert REPLICATED.confirm_commands(5) == (("WAIT", 2, 2), ("WAITAOF", 1, 2, 3))
    assert REPLICATED.confirm_commands(160) == (("WAIT", 2, 80), ("WAITAOF", 1, 2, 80))
    assert REPLICATED.confirm_commands(1) == (("WAIT", 2, 1), ("WAITAOF", 1, 2, 1))
    assert WAITING.confirm_commands(7) == (("WAIT", 1, 7),)
    assert REPLICATED.rounds() == [5, 10, 20, 40, 80, 160, 185]
    assert sum(DurabilityPolicy("replicated", 1, timeout_ms=1000).rounds()) == 1000
    assert DurabilityPolicy("replicated", 1, timeout_ms=3).rounds() == [3]
    assert DurabilityPolicy("replicated", 1, timeout_ms=6).rounds() == [5, 1]  # the last millisecond too
    assert not DurabilityPolicy().waits
    assert REPLICATED.again([1, 1])
    assert not REPLICATED.again([1, 2])
    assert not REPLICATED.again(ValueError("refused"))


def test_headers_and_messages() -> None:
    assert LOCAL.header() == "local"
    assert Reached("local", 1).header() == "local; replicas=1"
    assert Reached("replicated", 2).header() == "replicated; replicas=2"
    short = Shortfall("replicated", 2, 1, local_fsync=True).message()
    assert "durability 'replicated' not reached: only 1 of 2 replicas fsync'd it" in short
    assert "retry with the same message_id" in short
    assert "primary did not fsync" in Shortfall("replicated", 1, 1, local_fsync=False).message()


@pytest.mark.parametrize(
    ("shortfall", "said"),
    [
        # WAIT counts replicas that received the write (in memory), WAITAOF those that fsync'd it
        (Shortfall("local", 2, 1, local_fsync=True), "only 1 of 2 replicas received it in time"),
        (Shortfall("replicated", 2, 1, local_fsync=True), "only 1 of 2 replicas fsync'd it in time"),
        (
            Shortfall("replicated", 1, 0, local_fsync=False, reason="ERR unknown command 'WAITAOF'"),
            "the server refused the confirmation (ERR unknown command 'WAITAOF')",
        ),
    ],
)
def test_a_refusal_says_what_fell_short(shortfall: Shortfall, said: str) -> None:
    assert f"not reached: {said};" in shortfall.message()
