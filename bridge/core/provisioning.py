"""What ``bridge provision`` should do, decided without touching a namespace (``docs/provisioning.md``).

The adapter reads the namespace's queues, hands them here as plain ``{field: value}`` mappings (the
azure-servicebus ``QueueProperties`` attribute names), and gets back one ``Provision`` per queue:

- ``create``: the queue is missing; the adapter creates it with ``QueueDescription.options()``.
- ``exists``: it is there and matches every field the bridge cares about.
- ``differs``: it is there but some fields do not match. It is reported, never changed: an operator who
  changed a backlog queue did so on purpose, and the bridge cannot know why.
- ``extra``: a backlog queue of this primary namespace that the configured count does not use (e.g.
  ``contoso/x-servicebus-transfer/7`` with count 5). Reported, never deleted: cleaning up is the owner's job.

Names are matched case-insensitively, as Service Bus entity paths are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Literal

from bridge.core.paired import backlog_queue_index, backlog_queue_paths
from bridge.core.validation import DEFAULT_MAX_MESSAGE_SIZE

# .NET TimeSpan.MaxValue (10675199.02:48:05.4775807), truncated to microseconds. The SDK writes and reads it
# with rounding (...5.47758S out, ...477581 µs back), so "at the maximum" tolerates a millisecond.
TIMESPAN_MAX = timedelta(days=10675199, hours=2, minutes=48, seconds=5, microseconds=477580)
_MAX_TOLERANCE = timedelta(milliseconds=1)
INT_MAX = 2_147_483_647
STANDARD_MAX_MESSAGE_KB = DEFAULT_MAX_MESSAGE_SIZE // 1024

Action = Literal["exists", "create", "differs", "extra"]


@dataclass(frozen=True)
class QueueDescription:
    """The fields of a queue the bridge depends on; None means "whatever the namespace chooses".

    Field names are the SDK's keyword names, so ``options()`` goes straight into ``create_queue``.
    """

    max_size_in_megabytes: int | None = None
    max_delivery_count: int | None = None
    default_message_time_to_live: timedelta | None = None
    auto_delete_on_idle: timedelta | None = None
    lock_duration: timedelta | None = None
    dead_lettering_on_message_expiration: bool | None = None
    enable_batched_operations: bool | None = None
    requires_session: bool | None = None
    requires_duplicate_detection: bool | None = None
    max_message_size_in_kilobytes: int | None = None

    def options(self) -> dict[str, object]:
        """The fields that are set, as keyword arguments for the administration client."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


# Every field the .NET SDK's PairNamespaceAsync set explicitly on the backlog queues it created; the rest were
# QueueDescription's defaults (docs/references.md, ".NET paired namespaces").
BACKLOG_QUEUE = QueueDescription(
    max_size_in_megabytes=5120,
    max_delivery_count=INT_MAX,
    default_message_time_to_live=TIMESPAN_MAX,
    auto_delete_on_idle=TIMESPAN_MAX,
    lock_duration=timedelta(minutes=1),
    dead_lettering_on_message_expiration=True,
    enable_batched_operations=True,
)


def entity_queue_description(
    *, requires_session: bool, requires_duplicate_detection: bool, max_message_size: int
) -> QueueDescription:
    """The description of a configured entity, from its ``EntitySettings`` values.

    ``max_message_size_in_kilobytes`` exists only on Premium namespaces (1 MB to 100 MB), so it is asked for
    only when the entity's limit is above Standard's 256 KB; otherwise the namespace default stands.
    """
    kilobytes = -(-max_message_size // 1024)
    return QueueDescription(
        requires_session=requires_session,
        requires_duplicate_detection=requires_duplicate_detection,
        max_message_size_in_kilobytes=kilobytes if kilobytes > STANDARD_MAX_MESSAGE_KB else None,
    )


@dataclass(frozen=True)
class Difference:
    """One field of an existing queue that is not what the bridge wants."""

    field: str
    wanted: object
    actual: object


@dataclass(frozen=True)
class Provision:
    """The decision for one queue; ``differences`` is non-empty exactly when ``action`` is ``differs``."""

    name: str
    action: Action
    description: QueueDescription | None = None
    differences: tuple[Difference, ...] = ()


def is_at_max(value: object) -> bool:
    """A duration at .NET ``TimeSpan.MaxValue`` (as the SDK reads it back), i.e. "never"."""
    return isinstance(value, timedelta) and value >= TIMESPAN_MAX - _MAX_TOLERANCE


def matches(field: str, wanted: object, actual: object) -> bool:
    """Whether an observed value satisfies the wanted one.

    A wanted maximum duration accepts anything at the maximum (rounding differs by SDK and service). A
    larger message size limit than asked for is fine: the bridge only needs its messages to fit.
    """
    if is_at_max(wanted):
        return is_at_max(actual)
    if field == "max_message_size_in_kilobytes" and isinstance(wanted, int) and isinstance(actual, int):
        return actual >= wanted
    return wanted == actual


def differences(wanted: QueueDescription, observed: Mapping[str, object]) -> tuple[Difference, ...]:
    """The fields of ``observed`` that do not satisfy ``wanted`` (a missing field counts as None)."""
    out = []
    for name, value in wanted.options().items():
        actual = observed.get(name)
        if not matches(name, value, actual):
            out.append(Difference(name, value, actual))
    return tuple(out)


def plan(
    desired: Mapping[str, QueueDescription],
    existing: Mapping[str, Mapping[str, object]],
    is_extra: Callable[[str], bool] | None = None,
) -> tuple[Provision, ...]:
    """One decision per desired queue (in the given order), then one ``extra`` per unused existing queue.

    ``existing`` maps every queue the namespace has to its observed fields; ``is_extra`` picks which of the
    undesired ones deserve a report (the backlog queues nobody uses); nothing is ever planned for deletion.
    """
    observed = {name.casefold(): fields_ for name, fields_ in existing.items()}
    wanted_keys = {name.casefold() for name in desired}
    decisions: list[Provision] = []
    for name, description in desired.items():
        found = observed.get(name.casefold())
        if found is None:
            decisions.append(Provision(name, "create", description))
            continue
        diffs = differences(description, found)
        decisions.append(Provision(name, "differs" if diffs else "exists", description, diffs))
    if is_extra is not None:
        extras = (n for n in existing if n.casefold() not in wanted_keys and is_extra(n))
        decisions.extend(Provision(name, "extra") for name in sorted(extras, key=_backlog_order))
    return tuple(decisions)


def plan_backlog_queues(
    primary_namespace: str, count: int, existing: Mapping[str, Mapping[str, object]]
) -> tuple[Provision, ...]:
    """The backlog queues ``<primary>/x-servicebus-transfer/<i>``, i in [0, count), in the secondary."""
    desired = {path: BACKLOG_QUEUE for path in backlog_queue_paths(primary_namespace, count)}
    return plan(desired, existing, is_extra=lambda name: is_backlog_queue_of(primary_namespace, name))


def is_backlog_queue_of(primary_namespace: str, name: str) -> bool:
    """``name`` is a backlog queue path of ``primary_namespace`` (another primary's queues are not ours)."""
    return backlog_queue_index(name) is not None and name.split("/", 1)[0].casefold() == (
        primary_namespace.casefold()
    )


def _backlog_order(name: str) -> tuple[int, str]:
    index = backlog_queue_index(name)
    return (index if index is not None else -1, name)


def format_value(value: object) -> object:
    """A JSON-friendly value for reports: durations as ISO-8601 (``PT1M``), the maximum as ``"max"``."""
    if not isinstance(value, timedelta):
        return value
    if is_at_max(value):
        return "max"
    total = value.total_seconds()
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    clock = (f"{int(hours)}H" if hours else "") + (f"{int(minutes)}M" if minutes else "")
    if seconds:
        clock += f"{seconds:.6f}".rstrip("0").rstrip(".") + "S"
    text = (f"P{int(days)}D" if days else "P") + (f"T{clock}" if clock else "")
    return text if text != "P" else "PT0S"
