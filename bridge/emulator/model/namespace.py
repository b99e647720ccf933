"""One namespace of the local Service Bus: its entities (the catalog), sends, and the write-ahead journal.

The protocol adapters call in with decoded requests and ``now``; this module decides and mutates, and
reports every durable change to ``journal`` before the adapter acknowledges anything (the adapter flushes
the log before it writes its answers). Replaying those records after a restart, and writing the live state
as records to compact the log, is ``persistence``'s job; it uses the unjournaled ``put``/``drop``/
``enqueue`` here, so a replayed change goes through the same code as the original one.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bridge.emulator.errors import (
    ArgumentError,
    EntityAlreadyExistsError,
    EntityNotFoundError,
    InvalidOperationError,
    MessageSizeExceededError,
    QuotaExceededError,
)
from bridge.emulator.model.actions import evaluate
from bridge.emulator.model.descriptions import (
    DEFAULT_MAX_MESSAGE_SIZE,
    EntityDescription,
    EntityKind,
    QueueDescription,
    RuleDescription,
    RuntimeCounts,
    SubscriptionDescription,
    TopicDescription,
    kind_of,
    path_of,
)
from bridge.emulator.model.entities import Queue, Rule, Subscription, Topic
from bridge.emulator.model.messages import IncomingMessage, StoredMessage
from bridge.emulator.model.records import description_to_dict, incoming_to_record
from bridge.emulator.model.store import Journal, MessageStore, TokenFactory

DLQ_SUFFIX = "/$deadletterqueue"
MAX_NAME_LENGTH = 260


def _key(name: str) -> str:
    # Azure compares entity names case-insensitively.
    return name.strip("/").lower()


# (encoded message, properties to set, properties to remove) → the re-encoded message.
PropertiesWriter = Callable[[bytes, dict[str, Any], set[str]], bytes]


class Namespace:
    """Entities and messages of one namespace; implements the ``Catalog`` protocol."""

    def __init__(
        self,
        name: str,
        auto_create: bool = False,
        token_factory: TokenFactory = uuid.uuid4,
        properties_writer: PropertiesWriter | None = None,
    ) -> None:
        self.name = name
        self.auto_create = auto_create
        self.token_factory = token_factory
        # Rewrites a message's application properties for rule actions (the AMQP codec's; see ``actions``).
        self.properties_writer = properties_writer
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, Topic] = {}
        self._journal: Journal | None = None

    # ---- journal ---------------------------------------------------------------------------------
    def set_journal(self, journal: Journal | None) -> None:
        """Attach the write-ahead log (None while replaying)."""
        self._journal = journal
        for store in self.stores():
            store.set_journal(journal)

    def _log(self, kind: str, fields: dict[str, Any], blobs: list[bytes] | None = None) -> None:
        if self._journal is not None:
            self._journal(kind, fields, blobs or [])

    def stores(self) -> Iterator[MessageStore]:
        """Every queue's and subscription's store."""
        for queue in self.queues.values():
            yield queue.store
        for topic in self.topics.values():
            for sub in topic.subscriptions.values():
                yield sub.store

    # ---- catalog ---------------------------------------------------------------------------------
    def create(
        self, desc: EntityDescription, now: float, default_rule: RuleDescription | None = None
    ) -> EntityDescription:
        """Create an entity; raises EntityAlreadyExists, or EntityNotFound for a missing parent.

        A subscription starts with ``default_rule`` instead of the catch-all ``$Default`` when one is given;
        both go into one journal record, so a restart never finds the subscription without its rule."""
        self._check_name(desc)
        if default_rule is not None:
            if not isinstance(desc, SubscriptionDescription):
                raise ArgumentError("Only a subscription takes a default rule.")
            self._check_name(default_rule)
        if isinstance(desc, QueueDescription | TopicDescription) and (
            _key(desc.name) in self.queues or _key(desc.name) in self.topics
        ):
            raise EntityAlreadyExistsError(f"The messaging entity '{desc.name}' already exists.")
        self.put(desc, now, create=True, default_rule=default_rule)
        record: dict[str, Any] = {"d": description_to_dict(desc), "now": now, "new": True}
        if default_rule is not None:
            record["rule"] = description_to_dict(default_rule)
        self._log("put", record)
        return self.get(kind_of(desc), path_of(desc))

    def update(self, desc: EntityDescription, now: float) -> EntityDescription:
        """Replace an entity's description; raises EntityNotFound."""
        self.get(kind_of(desc), path_of(desc))
        self.put(desc, now, create=False)
        self._log("put", {"d": description_to_dict(desc), "now": now, "new": False})
        return self.get(kind_of(desc), path_of(desc))

    def _check_name(self, desc: EntityDescription) -> None:
        name = desc.name
        # ``$``-names are the broker's own (``$Default``, ``$deadletterqueue``); only rules may use one.
        if (
            not name
            or len(name) > MAX_NAME_LENGTH
            or (name.startswith("$") and not isinstance(desc, RuleDescription))
        ):
            raise ArgumentError(f"Invalid entity name {name!r}.")

    def put(
        self, desc: EntityDescription, now: float, create: bool, default_rule: RuleDescription | None = None
    ) -> None:
        """Create or redescribe an entity without journaling (shared by create, update and replay)."""
        if isinstance(desc, QueueDescription):
            if create:
                queue = Queue.create(desc, now, self.token_factory)
                queue.store.set_journal(self._journal)
                self.queues[_key(desc.name)] = queue
            else:
                self.queues[_key(desc.name)].redescribe(desc, now)
        elif isinstance(desc, TopicDescription):
            if create:
                self.topics[_key(desc.name)] = Topic.create(desc, now)
            else:
                topic = self.topics[_key(desc.name)]
                topic.desc, topic.updated_at = desc, now
        elif isinstance(desc, SubscriptionDescription):
            topic = self._topic(desc.topic_name)
            if create:
                if _key(desc.name) in topic.subscriptions:
                    raise EntityAlreadyExistsError(f"The subscription '{desc.name}' already exists.")
                sub = Subscription.create(desc, now, self.token_factory, default_rule)
                sub.store.set_journal(self._journal)
                topic.subscriptions[_key(desc.name)] = sub
            else:
                topic.subscriptions[_key(desc.name)].redescribe(desc, now)
        else:
            sub = self._subscription(desc.topic_name, desc.subscription_name)
            if create and _key(desc.name) in sub.rules:
                raise EntityAlreadyExistsError(f"The rule '{desc.name}' already exists.")
            sub.rules[_key(desc.name)] = Rule.compile(desc)

    def get(self, kind: EntityKind, path: str) -> EntityDescription:
        """The description of one entity of that kind."""
        parts = path.strip("/").split("/")
        if kind is EntityKind.QUEUE:
            queue = self.queues.get(_key(path))
            if queue is None:
                raise EntityNotFoundError(f"The messaging entity '{path}' could not be found.")
            return queue.desc
        if kind is EntityKind.TOPIC:
            return self._topic(path).desc
        if kind is EntityKind.SUBSCRIPTION and len(parts) == 3:
            return self._subscription(parts[0], parts[2]).desc
        if kind is EntityKind.RULE and len(parts) == 5:
            rule = self._subscription(parts[0], parts[2]).rules.get(_key(parts[4]))
            if rule is None:
                raise EntityNotFoundError(f"The rule '{path}' could not be found.")
            return rule.desc
        raise EntityNotFoundError(f"The messaging entity '{path}' could not be found.")

    def lookup(self, path: str) -> EntityDescription:
        """Whatever the path names."""
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[1].lower() == "subscriptions":
            return self.get(EntityKind.SUBSCRIPTION, path)
        if len(parts) == 5 and parts[3].lower() == "rules":
            return self.get(EntityKind.RULE, path)
        if _key(path) in self.topics:
            return self.topics[_key(path)].desc
        return self.get(EntityKind.QUEUE, path)

    def delete(self, kind: EntityKind, path: str) -> None:
        """Delete an entity and everything under it."""
        self.get(kind, path)
        self.drop(kind, path)
        self._log("del", {"k": kind.value, "p": path})

    def drop(self, kind: EntityKind, path: str) -> None:
        """Delete an existing entity without journaling (``delete`` and replay)."""
        parts = path.strip("/").split("/")
        if kind is EntityKind.QUEUE:
            del self.queues[_key(path)]
        elif kind is EntityKind.TOPIC:
            del self.topics[_key(path)]
        elif kind is EntityKind.SUBSCRIPTION:
            del self._topic(parts[0]).subscriptions[_key(parts[2])]
        else:
            del self._subscription(parts[0], parts[2]).rules[_key(parts[4])]

    # ``list`` is the Catalog protocol's name, so from here on the builtin is spelled ``builtins.list``.
    def list(self, kind: EntityKind, parent: str | None = None) -> builtins.list[EntityDescription]:
        """Entities of a kind sorted by name (subscriptions of a topic, rules of a subscription path)."""
        items: builtins.list[EntityDescription]
        if kind is EntityKind.QUEUE:
            items = [q.desc for q in self.queues.values()]
        elif kind is EntityKind.TOPIC:
            items = [t.desc for t in self.topics.values()]
        elif kind is EntityKind.SUBSCRIPTION:
            items = [s.desc for s in self._topic(parent or "").subscriptions.values()]
        else:
            parts = (parent or "").strip("/").split("/")
            if len(parts) != 3:
                raise EntityNotFoundError(f"The subscription '{parent}' could not be found.")
            items = [r.desc for r in self._subscription(parts[0], parts[2]).rules.values()]
        return sorted(items, key=lambda d: d.name.lower())

    def runtime(self, kind: EntityKind, path: str) -> RuntimeCounts:
        """Counts of a queue, topic or subscription."""
        self.get(kind, path)
        parts = path.strip("/").split("/")
        if kind is EntityKind.TOPIC:
            topic = self.topics[_key(path)]
            return RuntimeCounts(
                subscription_count=len(topic.subscriptions),
                size_in_bytes=sum(s.store.size_bytes for s in topic.subscriptions.values()),
                created_at=topic.created_at,
                updated_at=topic.updated_at,
                accessed_at=topic.accessed_at,
            )
        if kind is EntityKind.QUEUE:
            queue = self.queues[_key(path)]
            store, created, updated = queue.store, queue.created_at, queue.updated_at
        else:
            sub = self._subscription(parts[0], parts[2])
            store, created, updated = sub.store, sub.created_at, sub.updated_at
        active, scheduled, dead = store.counts()
        return RuntimeCounts(
            active_message_count=active,
            scheduled_message_count=scheduled,
            dead_letter_message_count=dead,
            total_message_count=active + scheduled + dead,
            size_in_bytes=store.size_bytes,
            created_at=created,
            updated_at=updated,
            accessed_at=updated,
        )

    def _topic(self, name: str) -> Topic:
        topic = self.topics.get(_key(name))
        if topic is None:
            raise EntityNotFoundError(f"The messaging entity '{name}' could not be found.")
        return topic

    def _subscription(self, topic: str, name: str) -> Subscription:
        sub = self._topic(topic).subscriptions.get(_key(name))
        if sub is None:
            raise EntityNotFoundError(
                f"The messaging entity '{topic}/Subscriptions/{name}' could not be found."
            )
        return sub

    # ---- messages --------------------------------------------------------------------------------
    def store(self, path: str, now: float | None = None) -> MessageStore:
        """The store a receiver reads: a queue, ``topic/Subscriptions/sub``, or their ``$deadletterqueue``.

        With ``now`` and auto-create on, a missing queue is created (as the emulator's ``--auto-create``
        promises); without ``now`` (replay, pumping) a missing entity is simply not found.
        """
        clean = path.strip("/")
        dead = clean.lower().endswith(DLQ_SUFFIX)
        if dead:
            clean = clean[: -len(DLQ_SUFFIX)]
        parts = clean.split("/")
        if len(parts) == 3 and parts[1].lower() == "subscriptions":
            store = self._subscription(parts[0], parts[2]).store
        else:
            queue = self.queues.get(_key(clean))
            if queue is None:
                if not (self.auto_create and now is not None and _key(clean) not in self.topics):
                    raise EntityNotFoundError(f"The messaging entity '{clean}' could not be found.")
                self.create(QueueDescription(name=clean), now)
                queue = self.queues[_key(clean)]
            store = queue.store
        if dead:
            assert store.dlq is not None
            return store.dlq
        return store

    def is_topic(self, path: str) -> bool:
        """True if ``path`` names a topic (its messages need filter properties)."""
        return _key(path) in self.topics

    def max_message_size(self, path: str) -> int:
        """Largest accepted encoded message, in bytes."""
        target = self.topics.get(_key(path)) or self.queues.get(_key(path))
        if target is None:
            return DEFAULT_MAX_MESSAGE_SIZE
        return target.desc.max_message_size_in_kilobytes * 1024

    def send_target(self, path: str) -> Queue | Topic | None:
        """The topic or queue ``path`` names, if it exists (topics first, as senders address either)."""
        return self.topics.get(_key(path)) or self.queues.get(_key(path))

    def send(self, path: str, messages: builtins.list[IncomingMessage], now: float) -> builtins.list[int]:
        """Enqueue messages all-or-nothing; returns their sequence numbers (0 for a dropped duplicate)."""
        target = self.send_target(path)
        if target is None:
            dlq = path.strip("/").lower().endswith(DLQ_SUFFIX)
            if not self.auto_create or dlq or _is_subscription(path):
                raise EntityNotFoundError(f"The messaging entity '{path}' could not be found.")
            self.create(QueueDescription(name=path.strip("/")), now)
            target = self.queues[_key(path)]
        limit = target.desc.max_message_size_in_kilobytes * 1024
        for msg in messages:
            if msg.size > limit:
                raise MessageSizeExceededError(
                    f"The received message (size {msg.size} bytes) exceeds the limit ({limit} bytes) "
                    f"of entity '{target.desc.name}'."
                )
        if isinstance(target, Queue):
            quota = target.desc.max_size_in_megabytes * 1024 * 1024
            if target.store.size_bytes + sum(m.size for m in messages) > quota:
                raise QuotaExceededError(f"The entity '{target.desc.name}' is at its maximum size.")
            if target.desc.requires_session and any(not m.session_id for m in messages):
                raise InvalidOperationError(
                    "The SessionId was not set on a message, and it cannot be sent to the entity. Entities "
                    "that have session support enabled can only receive messages that have the SessionId "
                    "set."
                )
        seqs = self.enqueue(target, messages, now)
        self._log(
            "send",
            {"p": path, "now": now, "m": [incoming_to_record(m) for m in messages]},
            [m.raw for m in messages],
        )
        return seqs

    def enqueue(
        self, target: Queue | Topic, messages: builtins.list[IncomingMessage], now: float
    ) -> builtins.list[int]:
        """Assign sequence numbers and route into stores, without checks or journaling (send and replay).

        Duplicate detection runs here rather than in ``send`` so replay rebuilds the same window.
        """
        window = target.desc.duplicate_detection_history_time_window.total_seconds()
        dedup = target.desc.requires_duplicate_detection
        target.accessed_at = now
        seqs: builtins.list[int] = []
        for msg in messages:
            if dedup and msg.message_id is not None:
                if target.dedup.is_duplicate(msg.message_id, now, window):
                    seqs.append(0)
                    continue
                target.dedup.remember(msg.message_id, now)
            seq = target.next_seq()
            seqs.append(seq)
            if isinstance(target, Queue):
                target.store.insert(_stored(msg, seq, now), now)
                continue
            props = msg.properties or {}
            for sub in target.subscriptions.values():
                matched = [rule for rule in sub.rules.values() if rule.predicate(props)]
                if matched:
                    sub.store.insert(_stored(msg, seq, now, self._acted_on(msg.raw, props, matched)), now)
        return seqs

    def _acted_on(self, raw: bytes, props: Mapping[str, Any], matched: builtins.list[Rule]) -> bytes:
        """The copy a subscription stores: its matching rules' actions applied, in rule-name order."""
        actions = [r.action for r in sorted(matched, key=lambda r: r.desc.name) if r.action is not None]
        if not actions:
            return raw
        if self.properties_writer is None:
            raise RuntimeError("rule actions need the namespace's properties writer")
        changes = evaluate(actions, props)
        return self.properties_writer(raw, changes.updates, changes.removed)

    def tick(self, now: float) -> builtins.list[MessageStore]:
        """Advance time; the stores (and DLQs) in which messages became ready."""
        woke: builtins.list[MessageStore] = []
        for store in self.stores():
            if store.tick(now):
                woke.append(store)
                if store.dlq is not None:
                    woke.append(store.dlq)
        return woke

    def next_deadline(self) -> float | None:
        """The earliest time ``tick`` has work."""
        deadlines = [d for d in (s.next_deadline() for s in self.stores()) if d is not None]
        return min(deadlines) if deadlines else None

    def disaster(self) -> None:
        """Lose every entity and message, as a destroyed datacenter would."""
        self.queues.clear()
        self.topics.clear()
        self._log("wipe", {})


def _is_subscription(path: str) -> bool:
    parts = path.strip("/").split("/")
    return len(parts) == 3 and parts[1].lower() == "subscriptions"


def _stored(msg: IncomingMessage, seq: int, now: float, raw: bytes | None = None) -> StoredMessage:
    return StoredMessage(
        seq=seq,
        raw=msg.raw if raw is None else raw,
        enqueued_at=now,
        message_id=msg.message_id,
        session_id=msg.session_id,
        partition_key=msg.partition_key,
        time_to_live=msg.time_to_live,
        scheduled_at=msg.scheduled_at,
    )
