"""Queues, topics and subscriptions: a description plus the state that goes with it."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass, field

from bridge.emulator.model.actions import Action, compile_action
from bridge.emulator.model.descriptions import (
    MAX_DURATION,
    QueueDescription,
    RuleDescription,
    SubscriptionDescription,
    TopicDescription,
)
from bridge.emulator.model.filters import Predicate, compile_filter
from bridge.emulator.model.store import MessageStore, StoreOptions, TokenFactory


def store_options(desc: QueueDescription | SubscriptionDescription) -> StoreOptions:
    """The behaviour-changing options of a queue or subscription."""
    ttl = desc.default_message_time_to_live
    return StoreOptions(
        lock_duration=desc.lock_duration.total_seconds(),
        max_delivery_count=desc.max_delivery_count,
        default_ttl=None if ttl >= MAX_DURATION else ttl.total_seconds(),
        dead_letter_on_expiration=desc.dead_lettering_on_message_expiration,
        requires_session=desc.requires_session,
    )


class DuplicateWindow:
    """MessageIds seen within the duplicate-detection window, oldest first."""

    def __init__(self) -> None:
        self.seen: OrderedDict[str, float] = OrderedDict()

    def is_duplicate(self, message_id: str, now: float, window: float) -> bool:
        """True if ``message_id`` was accepted less than ``window`` seconds ago."""
        while self.seen:
            oldest_id, oldest_at = next(iter(self.seen.items()))
            if oldest_at + window > now:
                break
            del self.seen[oldest_id]
        at = self.seen.get(message_id)
        return at is not None and at + window > now

    def remember(self, message_id: str, now: float) -> None:
        """Record an accepted MessageId."""
        self.seen[message_id] = now
        self.seen.move_to_end(message_id)


@dataclass
class SendTarget:
    """What queues and topics share: sequence numbers, duplicate detection, size limits."""

    last_seq: int = 0
    dedup: DuplicateWindow = field(default_factory=DuplicateWindow)
    created_at: float = 0.0
    updated_at: float = 0.0
    accessed_at: float = 0.0

    def next_seq(self) -> int:
        """Allocate the next sequence number."""
        self.last_seq += 1
        return self.last_seq


@dataclass
class Queue(SendTarget):
    """A queue: one message store."""

    desc: QueueDescription = field(default_factory=lambda: QueueDescription(name=""))
    store: MessageStore = field(default_factory=lambda: MessageStore("", StoreOptions()))

    @classmethod
    def create(cls, desc: QueueDescription, now: float, token_factory: TokenFactory) -> Queue:
        """A new, empty queue."""
        return cls(
            desc=desc,
            store=MessageStore(desc.name, store_options(desc), token_factory),
            created_at=now,
            updated_at=now,
        )

    def redescribe(self, desc: QueueDescription, now: float) -> None:
        """Apply a new description; messages stay."""
        self.desc = desc
        self.store.options = store_options(desc)
        self.updated_at = now


@dataclass
class Rule:
    """A subscription rule with its compiled predicate."""

    desc: RuleDescription
    predicate: Predicate
    action: Action | None = None

    @classmethod
    def compile(cls, desc: RuleDescription) -> Rule:
        """The rule with its filter and action compiled; ArgumentError for what the subset lacks."""
        action = compile_action(desc.action) if desc.action is not None else None
        return cls(desc, compile_filter(desc.filter), action)


@dataclass
class Subscription:
    """A subscription: its own message store and rules (a message matching any rule is copied in)."""

    desc: SubscriptionDescription
    store: MessageStore
    rules: dict[str, Rule] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0

    @classmethod
    def create(
        cls,
        desc: SubscriptionDescription,
        now: float,
        token_factory: TokenFactory,
        default_rule: RuleDescription | None = None,
    ) -> Subscription:
        """A new subscription with ``default_rule``, else the ``$Default`` rule (``1=1``)."""
        rule = dataclasses.replace(
            default_rule or RuleDescription(topic_name="", subscription_name=""),
            topic_name=desc.topic_name,
            subscription_name=desc.name,
        )
        compiled = Rule.compile(rule)
        path = f"{desc.topic_name}/Subscriptions/{desc.name}"
        sub = cls(
            desc=desc,
            store=MessageStore(path, store_options(desc), token_factory),
            created_at=now,
            updated_at=now,
        )
        sub.rules[rule.name.lower()] = compiled
        return sub

    def redescribe(self, desc: SubscriptionDescription, now: float) -> None:
        """Apply a new description; messages and rules stay."""
        self.desc = dataclasses.replace(desc, topic_name=self.desc.topic_name)
        self.store.options = store_options(desc)
        self.updated_at = now


@dataclass
class Topic(SendTarget):
    """A topic: no messages of its own, only subscriptions."""

    desc: TopicDescription = field(default_factory=lambda: TopicDescription(name=""))
    subscriptions: dict[str, Subscription] = field(default_factory=dict)

    @classmethod
    def create(cls, desc: TopicDescription, now: float) -> Topic:
        """A new topic without subscriptions."""
        return cls(desc=desc, created_at=now, updated_at=now)
