"""The syphon's per-message decisions (paired mode, SPEC §4): send, complete, dead-letter or wait.

The syphon beat task peek-locks batches from a backlog queue, restores each message (``aliasing.unalias``),
sends it to its original entity on the primary and completes the backlog message only after the primary
accepted it. These functions say what to do at each step; the task does the I/O. A message is never
completed before the primary accepted it, so a crash in between redelivers it (a duplicate with the same
MessageId, which receivers suppress) rather than losing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from bridge.core.aliasing import ExpiredInBacklog, NotAliased, UnaliasDecision
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
    ABANDON = "abandon"
    """Leave it in the backlog for a later pass (``syphon_retry_interval``)."""
    STOP = "stop"
    """The primary is failing: abandon this message and stop the batch."""


@dataclass(frozen=True)
class SyphonDecision:
    """A syphon action with its reason (dead-letter reason, or why it waits)."""

    action: SyphonAction
    reason: str = ""


def syphon_before_send(decision: UnaliasDecision, destination_state: PairedState) -> SyphonDecision:
    """After restoring a backlog message: send it, dead-letter it, or leave it while its entity is down."""
    if isinstance(decision, ExpiredInBacklog | NotAliased):
        return SyphonDecision(SyphonAction.DEAD_LETTER, decision.reason)
    if not destination_state.healthy:
        return SyphonDecision(SyphonAction.ABANDON, f"destination {decision.destination} is failed over")
    return SyphonDecision(SyphonAction.SEND)


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
        return SyphonDecision(SyphonAction.ABANDON, outcome.error or error_class.value)
    return SyphonDecision(SyphonAction.STOP, outcome.error or error_class.value)
