"""What an acknowledgement promises: the durability mode, the command that confirms it, and its verdict.

``local``: the write is in the primary's append-only file, fsync'd as its ``appendfsync`` says; with
``wait_replicas = n`` also received by ``n`` replicas (``WAIT``: in their memory, not yet on their disk).
``replicated``: the write is fsync'd to the primary's AOF and to ``n`` replicas' AOFs (``WAITAOF 1 n``,
Redis >= 7.2 / Valkey >= 7.2) before anyone is told it is stored; a failover to any of those replicas keeps
it. Too few confirmations in time: the caller is refused (HTTP 503) and told how many confirmed
(``docs/durability.md``, "Durability modes").

Pure: the outbox store sends ``confirm_commands`` one round trip after the write, on its connection, and
hands the last reply to ``verdict``; nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["local", "replicated"]

FENCE_CHANNEL = "bridge:durability"
"""Channel of the empty ``PUBLISH`` sent before the confirmation: it is replicated like a write, so the
confirmation covers everything the primary had before it, a re-posted duplicate's first copy included
(``WAIT``/``WAITAOF`` only wait for the connection's own last write, and a duplicate writes nothing)."""


FIRST_ROUND_MS = 5
"""The first confirmation's timeout; each next one doubles it until the whole timeout is spent.

A replica reports its fsync'd offset when the primary asks (``REPLCONF GETACK``, sent once when a wait
blocks) and otherwise once a second: when the question reaches it before its fsync (it was busy, or the
question came with the write), the answer says "not yet" and the next one comes up to a second later. Each
new wait makes the primary ask again, so short rounds confirm soon after the replica's fsync; a round that
starts with ``WAIT`` rarely needs a second one (``DurabilityPolicy.confirm_commands``)."""


@dataclass(frozen=True)
class DurabilityPolicy:
    """The deployment's mode, how many replicas must confirm, and for how long to wait (milliseconds)."""

    mode: Mode = "local"
    replicas: int = 0
    timeout_ms: int = 500

    @property
    def waits(self) -> bool:
        """True when a write is confirmed by a command of its own before it is acknowledged."""
        return self.mode == "replicated" or self.replicas > 0

    def confirm_commands(self, timeout_ms: int) -> tuple[tuple[str | int, ...], ...]:
        """One round's commands, sent together; the last one's reply is the round's.

        ``local`` with replicas: ``WAIT n timeout``. ``replicated``: ``WAIT n`` then ``WAITAOF 1 n``,
        sharing the timeout (each at least 1 ms: 0 would block for ever). A replica computes the fsync'd
        offset of its answer when it reads the question, and fsyncs only after everything it read in that
        pass: a question read together with the write is answered "not yet" — about one round in twenty
        alone, one in three with several writers — and that round waits out its timeout. ``WAIT`` returns
        once the replica answered for the write, which it sends after that pass's fsync; the ``WAITAOF``
        behind it then asks again, and this question finds the write on disk. The round costs a replica
        round trip more and no wait for nothing (``docs/durability.md``, "The cost of replicated").
        """
        if self.mode != "replicated":
            return (("WAIT", self.replicas, timeout_ms),)
        received = max(1, timeout_ms // 2)
        return (
            ("WAIT", self.replicas, received),
            ("WAITAOF", 1, self.replicas, max(1, timeout_ms - received)),
        )

    def rounds(self) -> list[int]:
        """The timeouts of the confirmation's rounds: ``FIRST_ROUND_MS``, doubling, summing to the timeout."""
        out: list[int] = []
        left = self.timeout_ms
        step = FIRST_ROUND_MS
        while left > 0:
            out.append(min(step, left))
            left -= out[-1]
            step *= 2
        return out

    def again(self, reply: object) -> bool:
        """True when a round's reply fell short (and was no refusal): the next round may still confirm."""
        return not isinstance(reply, Exception) and isinstance(verdict(self, reply), Shortfall)


@dataclass(frozen=True)
class Reached:
    """The durability one write reached: the mode, and how many replicas confirmed it."""

    mode: Mode
    replicas: int = 0

    def header(self) -> str:
        """The ``Bridge-Durability`` header: ``replicated; replicas=2``, ``local``, ``local; replicas=1``."""
        if self.mode == "replicated" or self.replicas:
            return f"{self.mode}; replicas={self.replicas}"
        return "local"


LOCAL = Reached("local")
"""The durability of a write no confirmation was asked for."""


@dataclass(frozen=True)
class Shortfall:
    """Too few confirmations in time: what was asked and what came (the refusal's text)."""

    mode: Mode
    required: int
    confirmed: int
    local_fsync: bool
    reason: str = ""

    def message(self) -> str:
        """Why the write is refused, naming the mode and the counts; the write itself did happen."""
        if self.reason:
            said = f"the server refused the confirmation ({self.reason})"
        elif self.mode == "replicated" and not self.local_fsync:
            said = "the primary did not fsync it to its append-only file in time"
        else:
            verb = "fsync'd" if self.mode == "replicated" else "received"
            said = f"only {self.confirmed} of {self.required} replicas {verb} it in time"
        return (
            f"durability {self.mode!r} not reached: {said}; written on the primary but not acknowledged, "
            "retry with the same message_id"
        )


def verdict(policy: DurabilityPolicy, reply: object) -> Reached | Shortfall:
    """The confirmation's reply read against the policy; an error reply (``Exception``) is a shortfall."""
    if not policy.waits:
        return LOCAL
    if isinstance(reply, Exception):
        return Shortfall(policy.mode, policy.replicas, 0, local_fsync=False, reason=str(reply)[:200])
    if policy.mode == "replicated":
        local, replicas = (int(part) for part in reply) if isinstance(reply, list | tuple) else (0, 0)
        if local >= 1 and replicas >= policy.replicas:
            return Reached("replicated", replicas)
        return Shortfall("replicated", policy.replicas, replicas, local_fsync=local >= 1)
    received = int(reply) if isinstance(reply, int | bytes | str) else 0
    if received >= policy.replicas:
        return Reached("local", received)
    return Shortfall("local", policy.replicas, received, local_fsync=True)
