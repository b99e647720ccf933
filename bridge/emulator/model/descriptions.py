"""Entity descriptions of the local Service Bus: what ``ServiceBusAdministrationClient`` reads and writes.

Plain frozen dataclasses with Azure's defaults. Durations are ``datetime.timedelta``; ``MAX_DURATION`` is
what Azure reports for "never" (TimeSpan.MaxValue, ``P10675199DT2H48M5.4775807S``). The management endpoint
translates these to and from the Atom/XML wire format; the broker model reads the options that change
behaviour (lock duration, max delivery count, TTL, sessions, duplicate detection, size limits).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

MAX_DURATION = timedelta(days=10675199, seconds=10085, microseconds=477580)
DEFAULT_MAX_MESSAGE_SIZE = 256 * 1024
INT_MAX = 2_147_483_647


class EntityKind(StrEnum):
    """What a path names."""

    QUEUE = "queue"
    TOPIC = "topic"
    SUBSCRIPTION = "subscription"
    RULE = "rule"


@dataclass(frozen=True, slots=True)
class QueueDescription:
    """A queue's options (Azure names, snake_case)."""

    name: str
    lock_duration: timedelta = timedelta(seconds=60)
    max_size_in_megabytes: int = 1024
    requires_duplicate_detection: bool = False
    requires_session: bool = False
    default_message_time_to_live: timedelta = MAX_DURATION
    dead_lettering_on_message_expiration: bool = False
    duplicate_detection_history_time_window: timedelta = timedelta(minutes=10)
    max_delivery_count: int = 10
    enable_batched_operations: bool = True
    auto_delete_on_idle: timedelta = MAX_DURATION
    enable_partitioning: bool = False
    status: str = "Active"
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    user_metadata: str | None = None
    max_message_size_in_kilobytes: int = DEFAULT_MAX_MESSAGE_SIZE // 1024
    enable_express: bool = False


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic's options."""

    name: str
    max_size_in_megabytes: int = 1024
    requires_duplicate_detection: bool = False
    default_message_time_to_live: timedelta = MAX_DURATION
    duplicate_detection_history_time_window: timedelta = timedelta(minutes=10)
    enable_batched_operations: bool = True
    auto_delete_on_idle: timedelta = MAX_DURATION
    enable_partitioning: bool = False
    support_ordering: bool = True
    status: str = "Active"
    user_metadata: str | None = None
    max_message_size_in_kilobytes: int = DEFAULT_MAX_MESSAGE_SIZE // 1024
    enable_express: bool = False


@dataclass(frozen=True, slots=True)
class SubscriptionDescription:
    """A subscription's options (``topic_name`` is its parent)."""

    topic_name: str
    name: str
    lock_duration: timedelta = timedelta(seconds=60)
    requires_session: bool = False
    default_message_time_to_live: timedelta = MAX_DURATION
    dead_lettering_on_message_expiration: bool = False
    dead_lettering_on_filter_evaluation_exceptions: bool = True
    max_delivery_count: int = 10
    enable_batched_operations: bool = True
    auto_delete_on_idle: timedelta = MAX_DURATION
    status: str = "Active"
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    user_metadata: str | None = None


@dataclass(frozen=True, slots=True)
class SqlRuleFilter:
    """A SQL filter (the subset in ``filters``), with ``@name`` parameters substituted from ``parameters``."""

    sql_expression: str = "1=1"
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SqlRuleAction:
    """A rule action: ``SET``/``REMOVE`` statements on the copy a subscription gets (``actions``)."""

    sql_expression: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CorrelationRuleFilter:
    """A correlation filter: every set field must equal the message's (application ``properties`` too)."""

    correlation_id: str | None = None
    message_id: str | None = None
    to: str | None = None
    reply_to: str | None = None
    label: str | None = None
    session_id: str | None = None
    reply_to_session_id: str | None = None
    content_type: str | None = None
    properties: dict[str, Any] = field(default_factory=dict)


RuleFilter = SqlRuleFilter | CorrelationRuleFilter


@dataclass(frozen=True, slots=True)
class RuleDescription:
    """A subscription rule; a new subscription gets ``$Default`` with ``1=1``."""

    topic_name: str
    subscription_name: str
    name: str = "$Default"
    filter: RuleFilter = field(default_factory=SqlRuleFilter)
    action: SqlRuleAction | None = None


EntityDescription = QueueDescription | TopicDescription | SubscriptionDescription | RuleDescription


def kind_of(desc: EntityDescription) -> EntityKind:
    """The kind of entity a description describes."""
    if isinstance(desc, QueueDescription):
        return EntityKind.QUEUE
    if isinstance(desc, TopicDescription):
        return EntityKind.TOPIC
    if isinstance(desc, SubscriptionDescription):
        return EntityKind.SUBSCRIPTION
    return EntityKind.RULE


def path_of(desc: EntityDescription) -> str:
    """The Azure path of the entity a description describes (``t1/Subscriptions/s1/Rules/r1``)."""
    if isinstance(desc, SubscriptionDescription):
        return f"{desc.topic_name}/Subscriptions/{desc.name}"
    if isinstance(desc, RuleDescription):
        return f"{desc.topic_name}/Subscriptions/{desc.subscription_name}/Rules/{desc.name}"
    return desc.name


@dataclass(frozen=True, slots=True)
class RuntimeCounts:
    """Runtime properties of a queue or subscription (topics report the sum of nothing: zeros + size)."""

    active_message_count: int = 0
    dead_letter_message_count: int = 0
    scheduled_message_count: int = 0
    transfer_message_count: int = 0
    transfer_dead_letter_message_count: int = 0
    size_in_bytes: int = 0
    total_message_count: int = 0
    subscription_count: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    accessed_at: float = 0.0
