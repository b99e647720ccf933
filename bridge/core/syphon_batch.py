"""The syphon's plan for one received batch, after the per-message decisions (``bridge.core.syphon``).

``plan_received`` says per message what happens; the batch still needs its order worked out, and that is
decided here, with no I/O, for ``bridge.paired.syphon`` to carry out:

1. settle first what needs no send (dead-letters, messages set aside, ``settle_first``);
2. send the rest, one group per destination in the order each first appears (``send_groups``), and turn
   each group's send result into decisions (``after_send``);
3. pass the restore barriers whose destination's earlier messages in the batch have all gone
   (``passing_barriers``): none once the run stopped, and none behind a message set aside;
4. set aside whatever is still unsettled (``leftovers``): the run stopped before it got there.

Before any message is deferred its sequence number is recorded (``to_record``), so that its destination
is held behind it even if the deferral fails.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from bridge.core.outcomes import Outcome
from bridge.core.syphon import SyphonAction, SyphonDecision, syphon_after_send

STOPPED = "syphon stopped"
"""Why a message the run did not reach is set aside."""


def settle_first(plan: Sequence[SyphonDecision]) -> dict[int, SyphonDecision]:
    """The decisions settled before any send: everything but sends and barriers, by index."""
    later = (SyphonAction.SEND, SyphonAction.PASS_BARRIER)
    return {i: d for i, d in enumerate(plan) if d.action not in later}


def send_groups(plan: Sequence[SyphonDecision], destinations: Sequence[str | None]) -> dict[str, list[int]]:
    """The indexes to send, grouped by destination, groups in the order their destination first appears."""
    groups: dict[str, list[int]] = {}
    for index, decision in enumerate(plan):
        destination = destinations[index]
        if decision.action is SyphonAction.SEND and destination is not None:
            groups.setdefault(destination, []).append(index)
    return groups


@dataclass
class SendVerdict:
    """What one group's send means for its messages, and for the run."""

    decisions: dict[int, SyphonDecision] = field(default_factory=dict)
    """By batch index: complete, dead-letter or set aside."""
    passing_failure: bool = False
    """Some message is set aside for a passing reason: the run may wait a retry interval before polling."""
    stopped: str | None = None
    """The primary is failing: why the run stops (the messages concerned are set aside)."""


def after_send(
    indexes: Sequence[int], accepted: Collection[int], failures: Mapping[int, Outcome], destination: str
) -> SendVerdict:
    """Decide per sent message from the send's result: the positions (within ``indexes``) in ``accepted``
    complete; every other one is judged by its outcome in ``failures``."""
    verdict = SendVerdict()
    for position, index in enumerate(indexes):
        outcome = Outcome.success() if position in accepted else failures[position]
        decision = syphon_after_send(outcome, destination)
        if decision.action is SyphonAction.SET_ASIDE:
            verdict.passing_failure = True
        if decision.action is SyphonAction.STOP:
            verdict.stopped = f"primary failed for {destination}: {decision.reason}"
            decision = SyphonDecision(SyphonAction.SET_ASIDE, decision.reason)
        verdict.decisions[index] = decision
    return verdict


def passing_barriers(
    plan: Sequence[SyphonDecision],
    destinations: Sequence[str | None],
    set_aside: Collection[int],
    stopped: bool,
) -> dict[int, SyphonDecision]:
    """The barriers that pass now: after the sends, none once the run ``stopped``, and none with an earlier
    message of its destination in this batch ``set_aside`` (it stays unsettled, set aside behind it)."""
    if stopped:
        return {}
    return {
        i: d
        for i, d in enumerate(plan)
        if d.action is SyphonAction.PASS_BARRIER
        and not any(j < i and destinations[j] == destinations[i] for j in set_aside)
    }


def leftovers(unsettled: Collection[int]) -> dict[int, SyphonDecision]:
    """Set aside what the run did not settle, in index order."""
    return {i: SyphonDecision(SyphonAction.SET_ASIDE, STOPPED) for i in sorted(unsettled)}


def to_record(
    decisions: Mapping[int, SyphonDecision], destinations: Sequence[str | None], numbers: Sequence[int]
) -> dict[str, list[int]]:
    """The sequence numbers to record as set aside, by destination, before any of them is deferred."""
    fresh: dict[str, list[int]] = {}
    for index, decision in decisions.items():
        destination = destinations[index]
        if decision.action is SyphonAction.SET_ASIDE and destination is not None:
            fresh.setdefault(destination, []).append(numbers[index])
    return fresh
