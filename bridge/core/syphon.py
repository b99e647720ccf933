"""The syphon's per-message decisions (``docs/paired.md``): send, complete, dead-letter or set aside.

The syphon beat task peek-locks batches from a backlog queue, restores each message (``aliasing.unalias``),
sends it to its original entity on the primary and completes the backlog message only after the primary
accepted it. These functions say what to do at each step; the task does the I/O. A message is never
completed before the primary accepted it, so a crash in between redelivers it (a duplicate with the same
MessageId, which receivers suppress) rather than losing it.

Order is kept per destination entity, which keeps it per SessionId / PartitionKey a fortiori: a message
that cannot go now (its destination is failed over, a send failed for a passing reason, or an earlier
message of the same destination is already set aside) is *set aside* — deferred, its sequence number
recorded — and so is every later message of that destination (``plan_received``). Set-aside messages go
first, in sequence order, once their destination is healthy. Nothing is abandoned: an abandoned message
would come back at the head of the queue and be received again and again (each receive billed) while the
healthy entities' messages behind it waited.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

from bridge.core.aliasing import ExpiredInBacklog, NotAliased, Restored, UnaliasDecision
from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome
from bridge.core.paired import PairedState


class SyphonAction(StrEnum):
    """What the syphon does with one backlog message."""

    SEND = "send"
    """Send the restored message to its destination on the primary."""
    COMPLETE = "complete"
    """The primary accepted it: complete the backlog message."""
    DEAD_LETTER = "dead_letter"
    """Dead-letter the backlog message with the reason (expired, not aliased, destination missing)."""
    SET_ASIDE = "set_aside"
    """Defer it and record its sequence number: it goes, in order, once its destination can take it."""
    STOP = "stop"
    """The primary is failing: set this message and the rest of the batch aside and stop the run."""
    PASS_BARRIER = "pass_barrier"  # noqa: S105  (an action name, not a password)
    """A restore barrier reached in order: tell its shard (``bridge.state.backlog``), complete it."""


@dataclass(frozen=True)
class Barrier:
    """A restore barrier in a backlog queue: shard ``shard`` of ``destination`` sent it (with ``token``)
    after all its messages there; reaching it in order means they have all left the backlog."""

    destination: str
    shard: int
    token: str


@dataclass(frozen=True)
class SyphonDecision:
    """A syphon action with its reason (dead-letter reason, or why it waits)."""

    action: SyphonAction
    reason: str = ""


def syphon_before_send(
    decision: UnaliasDecision, destination_state: PairedState, held: bool = False
) -> SyphonDecision:
    """After restoring a backlog message: send it, dead-letter it, or set it aside.

    ``held``: an earlier message of the same destination is set aside, so this one must follow it there.
    """
    if isinstance(decision, ExpiredInBacklog | NotAliased):
        return SyphonDecision(SyphonAction.DEAD_LETTER, decision.reason)
    if not destination_state.healthy:
        return SyphonDecision(SyphonAction.SET_ASIDE, f"destination {decision.destination} is failed over")
    if held:
        return SyphonDecision(
            SyphonAction.SET_ASIDE, f"an earlier message of {decision.destination} is set aside"
        )
    return SyphonDecision(SyphonAction.SEND)


def plan_received(
    decisions: Sequence[UnaliasDecision | Barrier],
    state_of: Callable[[str], PairedState],
    held: Collection[str] = frozenset(),
) -> list[SyphonDecision]:
    """Per message of a batch, in receive order: SEND, SET_ASIDE, DEAD_LETTER or PASS_BARRIER.

    ``held`` are the destinations with messages set aside already. Once a message of a destination is set
    aside, every later one of the same destination in the batch is too, so none overtakes it; a restore
    barrier is one of its destination's messages in this respect (it passes only after all before it).
    """
    blocked = set(held)
    out: list[SyphonDecision] = []
    for decision in decisions:
        if isinstance(decision, Barrier):
            destination = decision.destination
            if destination in blocked or not state_of(destination).healthy:
                blocked.add(destination)
                verdict = SyphonDecision(SyphonAction.SET_ASIDE, f"barrier behind {destination}'s messages")
            else:
                verdict = SyphonDecision(SyphonAction.PASS_BARRIER)
        elif isinstance(decision, Restored):
            destination = decision.destination
            verdict = syphon_before_send(decision, state_of(destination), destination in blocked)
            if verdict.action is SyphonAction.SET_ASIDE:
                blocked.add(destination)
        else:
            verdict = syphon_before_send(decision, PairedState())
        out.append(verdict)
    return out


def syphon_after_send(outcome: Outcome, destination: str) -> SyphonDecision:
    """After sending a restored message to the primary: complete only once the primary accepted it."""
    if outcome.ok:
        return SyphonDecision(SyphonAction.COMPLETE)
    if outcome.entity_missing:
        reason = f"destination_missing: {destination}: {outcome.error}"
        return SyphonDecision(SyphonAction.DEAD_LETTER, reason)
    error_class = outcome.failed_with
    if error_class is ErrorClass.MESSAGE_PERMANENT:
        return SyphonDecision(SyphonAction.DEAD_LETTER, f"rejected_by_primary: {outcome.error}")
    if error_class is ErrorClass.TRANSIENT:
        return SyphonDecision(SyphonAction.SET_ASIDE, outcome.error or error_class.value)
    return SyphonDecision(SyphonAction.STOP, outcome.error or error_class.value)


def split_reason(reason: str) -> tuple[str, str]:
    """``"<code>: <details>"`` → (code, details): a short dead-letter reason and its description."""
    code, sep, details = reason.partition(": ")
    return (code, details) if sep else (reason, "")


def syphon_lease_name(queue: str) -> str:
    """The named lease (``bridge.redis.lease``) that makes one syphon the only one of backlog ``queue``."""
    return f"syphon:{queue}"
