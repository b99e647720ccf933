"""Atomic outbox writes: idempotency check, ``XADD`` to the right shard and the pending counters, in one step.

A *group* is what one caller wants stored atomically (one HTTP request, one ``send_batch``): all its
messages are written or none is. Groups for the same entity travel in one ``EVALSHA`` of the ``WRITE``
script, and the scripts of all entities in one pipeline, so a burst of concurrent requests costs one round
trip (see ``bridge.outbox.batcher``). The caller is acknowledged only after Redis answered and, when the
durability policy (``bridge.core.durability``) waits, only after ``WAIT`` / ``WAITAOF`` confirmed the write.

``OutboxWriter`` holds no connection: it turns groups into commands and replies into results, so the same
logic serves the blocking ``SyncOutbox`` (``Producer``) and the asyncio ``AsyncOutbox`` (HTTP,
``AsyncProducer``).

Bounds: per entity, the script refuses a group that would take the entity past ``max_pending_messages`` or
``max_pending_bytes``. The total over all entities is checked in the same script on a single Redis. On a
Cluster the total lives in another slot, so it is kept by a separate ``HINCRBY`` after each write and checked
against the last value this process saw: it may overshoot by what concurrent writers add in between.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from bridge.core.durability import LOCAL, DurabilityPolicy, Reached
from bridge.core.envelope import REQUIRED_OVERHEAD, Envelope, encode_time
from bridge.core.partitioning import choose_shard, partition_key
from bridge.core.validation import EntityRules
from bridge.errors import BackpressureError, BridgeError, OutboxLayoutChangedError, OutboxUnavailableError
from bridge.journal import keys as journal_keys
from bridge.outbox import keys
from bridge.settings import Settings


@dataclass(frozen=True, slots=True)
class Ack:
    """Where an accepted message is: its shard and stream entry; ``duplicate`` when it was there already."""

    message_id: str
    shard: int
    entry_id: str
    duplicate: bool
    durability: Reached = LOCAL
    """What the acknowledgement promises (the mode reached and the replicas that confirmed)."""


@dataclass(frozen=True)
class EntityPolicy:
    """What the writer needs to know about one entity."""

    rules: EntityRules
    shards: int
    max_messages: int
    max_bytes: int


@dataclass
class Group:
    """One atomic write: the envelopes of one request, their shards, their encoded fields."""

    entity: str
    envelopes: Sequence[Envelope]
    args: list[bytes | str | int] = field(default_factory=list)
    messages: int = 0
    size: int = 0
    transactional: bool = False
    fresh: Sequence[bool] | None = None
    """How it was built, so it can be built again for another shard count (``OutboxWriter.regroup``)."""
    door: str = ""
    """Which door it came through (``http``, ``rest``, ``producer``, ``redis-door``): the journal's
    ``accepted`` event records it."""


@dataclass(frozen=True)
class Command:
    """One ``EVALSHA`` of the write script for one entity, and the groups it carries (in order)."""

    entity: str
    keys: list[str]
    args: list[bytes | str | int]
    groups: list[Group]


class OutboxWriter:
    """Turns groups into script calls and script replies into acks or errors (no I/O here)."""

    def __init__(self, settings: Settings, *, cluster: bool = False) -> None:
        self.settings = settings
        self.cluster = cluster
        ingress = settings.ingress
        self.window_ms = max(1, int(ingress.idempotency_window * 1000))
        self.retry_after = ingress.retry_after
        self.durability = DurabilityPolicy(
            ingress.durability, ingress.wait_replicas, max(1, int(ingress.wait_timeout * 1000))
        )
        self.total_messages = ingress.max_total_messages
        self.total_bytes = ingress.max_total_bytes
        # The write script journals each stored message (``accepted``) when this is above 0.
        self.journal_max = settings.journal.max_length if settings.journal.enabled else 0
        self._round_robin = itertools.count()
        self._policies: dict[str, EntityPolicy] = {}
        # The shard count recorded in Redis per entity, learnt from the write script's refusals; it wins
        # over the settings while a migration (bridge.core.layout) is pending or done.
        self.layouts: dict[str, int] = {}
        # Cluster only: the totals as last seen by this process.
        self.seen_totals = (0, 0)

    def policy(self, entity: str) -> EntityPolicy:
        """The entity's rules, shard count and bounds (cached; settings are immutable)."""
        policy = self._policies.get(entity)
        if policy is None:
            conf = self.settings.entity(entity)
            policy = EntityPolicy(
                rules=EntityRules(
                    max_message_size=conf.max_message_size,
                    requires_session=conf.requires_session,
                    requires_duplicate_detection=conf.requires_duplicate_detection,
                ),
                shards=conf.outbox_shards,
                max_messages=conf.max_pending_messages,
                max_bytes=conf.max_pending_bytes,
            )
            self._policies[entity] = policy
        return policy

    def group(
        self,
        entity: str,
        envelopes: Sequence[Envelope],
        *,
        transactional: bool = False,
        fresh: Sequence[bool] | None = None,
        door: str = "",
    ) -> Group:
        """Assign shards and encode; a transactional group goes to one shard so it stays together.

        ``fresh[i]`` says the bridge generated message ``i``'s id a moment ago, so it cannot be a duplicate
        and the script skips the lookup (it still records the id for later re-posts).
        """
        policy = self.policy(entity)
        shard_count = self.shards(entity)
        dedup = policy.rules.requires_duplicate_detection
        group = Group(entity=entity, envelopes=envelopes, transactional=transactional, fresh=fresh, door=door)
        fixed: int | None = None
        if transactional and envelopes:
            fixed = choose_shard(partition_key(envelopes[0], dedup), shard_count, next(self._round_robin))
        elif shard_count == 1:
            fixed = 0
        # The script's layout (bridge.outbox.scripts): three strings of one byte per message, then per
        # message its id, body, ``at`` and optional fields.
        shards = bytearray()
        flags = bytearray()
        counts = bytearray()
        values: list[bytes | str | int] = []
        append = values.append
        size_total = 0
        # Every message of a request shares its acceptance time: encode ``at`` once per distinct value.
        last_at: float | None = None
        at = b""
        overhead = REQUIRED_OVERHEAD + len(entity.encode())
        for index, envelope in enumerate(envelopes):
            if envelope.entity != entity:
                raise ValueError(f"envelope for {envelope.entity!r} in a group for {entity!r}")
            if envelope.accepted_at != last_at:
                last_at = envelope.accepted_at
                at = encode_time(last_at)
            message_id = envelope.message_id.encode()
            body = envelope.body
            optional = envelope.encode_optional()
            shards.append(
                fixed
                if fixed is not None
                else choose_shard(partition_key(envelope, dedup), shard_count, next(self._round_robin))
            )
            flags.append(1 if fresh is not None and fresh[index] else 0)
            counts.append(len(optional))
            append(message_id)
            append(body)
            append(at)
            size_total += overhead + len(message_id) + len(body) + len(at)
            if optional:
                values.extend(optional)
                size_total += sum(map(len, optional))
        group.args = [bytes(shards), bytes(flags), bytes(counts), *values]
        group.messages = len(envelopes)
        group.size = size_total
        return group

    def shards(self, entity: str) -> int:
        """The shard count this writer uses for ``entity``: Redis's as last learnt, else the settings'."""
        return self.layouts.get(entity) or self.policy(entity).shards

    def regroup(self, group: Group) -> Group:
        """``group`` built again for the entity's current shard count (after a layout refusal)."""
        return self.group(
            group.entity,
            group.envelopes,
            transactional=group.transactional,
            fresh=group.fresh,
            door=group.door,
        )

    def commands(self, groups: Sequence[Group]) -> list[Command]:
        """One script call per entity, groups in arrival order."""
        by_entity: dict[str, list[Group]] = {}
        for group in groups:
            by_entity.setdefault(group.entity, []).append(group)
        out = []
        for entity, members in by_entity.items():
            policy = self.policy(entity)
            use_totals = not self.cluster
            script_keys = [
                keys.stats(entity),
                keys.message_id_prefix(entity),
                keys.TOTALS if use_totals else keys.stats(entity),
                *(keys.outbox(entity, shard) for shard in range(self.shards(entity))),
                keys.layout(entity),
                journal_keys.journal(entity),
                journal_keys.overflow(entity),
                keys.ENTITIES if use_totals else keys.stats(entity),
            ]
            args: list[bytes | str | int] = [
                self.window_ms,
                policy.max_messages,
                policy.max_bytes,
                self.total_messages,
                self.total_bytes,
                1 if use_totals else 0,
                entity,
                len(members),
                self.journal_max,
            ]
            for group in members:
                args.append(group.messages)
                args.append(group.door)
                args.extend(group.args)
            out.append(Command(entity=entity, keys=script_keys, args=args, groups=members))
        return out

    def over_seen_totals(self, group: Group) -> bool:
        """Cluster only: would this group pass the total bound as this process last saw it?"""
        messages, size = self.seen_totals
        return messages + group.messages > self.total_messages or size + group.size > self.total_bytes

    def results(self, command: Command, reply: object) -> list[list[Ack] | BridgeError]:
        """Per group of ``command``: its acks, or the ``BackpressureError`` that refused it."""
        if not isinstance(reply, list) or len(reply) != len(command.groups):
            raise OutboxUnavailableError("unexpected reply from the outbox write script")
        out: list[list[Ack] | BridgeError] = []
        for group, answer in zip(command.groups, reply, strict=True):
            if int(answer[0]) == 2:
                recorded = int(answer[1])
                out.append(
                    OutboxLayoutChangedError(
                        f"the outbox of {group.entity!r} has {recorded} shards now; write again", recorded
                    )
                )
                continue
            if int(answer[0]) == 0:
                scope = "the bridge" if answer[1] in (b"total", "total") else f"entity {group.entity!r}"
                out.append(
                    BackpressureError(
                        f"the outbox of {scope} is full; retry later", retry_after=self.retry_after
                    )
                )
                continue
            acks = []
            for envelope, marker, duplicate in zip(group.envelopes, answer[1::2], answer[2::2], strict=True):
                text = marker.decode() if type(marker) is bytes else str(marker)
                shard, _, entry_id = text.partition(" ")
                acks.append(Ack(envelope.message_id, int(shard), entry_id, int(duplicate) == 1))
            out.append(acks)
        return out

    def accepted(
        self, results: Sequence[list[Ack] | BridgeError], groups: Sequence[Group]
    ) -> tuple[int, int]:
        """Messages and bytes newly stored (duplicates excluded), for the cluster-mode totals."""
        messages = size = 0
        for result, group in zip(results, groups, strict=True):
            if isinstance(result, list):
                fresh = sum(1 for ack in result if not ack.duplicate)
                messages += fresh
                size += group.size * fresh // max(1, group.messages)
        return messages, size
