"""The state one shard's tenure carries between batches and turns (``TenureState``): small dataclasses.

``ShardDrainer`` (``bridge.delivery.drainer``) owns one ``TenureState`` and hands it to its two
collaborators: the sending part (``bridge.delivery.shard_sending``: one recorded send, health, abandoned
sends) and the settling part (``bridge.delivery.shard_settling``: carrying out the settle plan, holds,
acknowledgements, state changes). What the tenure knows lives here and nowhere else, grouped by what it is:
``tenure`` (its names, fence and the entity's settings: fixed), ``backoff`` (retry count and when the next
batch may start), ``holds`` (held keys), ``abandoned`` (paths it must not send to yet), ``reading`` (where
the next claim starts, whether to claim or read new entries), ``batch`` (what was read with this batch and
what its sends recorded so far: journal events, health owed, sends not yet counted) and ``report``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from bridge.core.cost import CostTally, Operation
from bridge.core.roles import Role, RoleState
from bridge.delivery.attempts import BatchOutcome
from bridge.delivery.context import DeliveryContext
from bridge.delivery.read_ahead import PackedAhead
from bridge.journal.emit import BatchJournal, namespace_names
from bridge.outbox.reader import OutboxEntry
from bridge.redis.fence import Fence

READ_COUNT = 1000
"""Most entries per read or claim: a batch goes in as few ``ServiceBusMessageBatch``es as the link's size
limit allows (one transfer each). Why 1,000 and not the 200 it was: a shard catching up after an outage
pays per batch (the read and the settlement scripts, each send's round trip, the hand-offs between
threads on a busy process); with 200-byte messages ``bench.outage``'s drain moved 1.3 to 1.6 times as many
messages a second with reads of 1,000 (``docs/outages.md``). At a steady rate a read takes what is there,
far fewer."""
READ_BYTES = 1024 * 1024
"""About how many bytes of entries one read takes (``read_count``): large messages are read fewer at a
time, so a batch and the one read ahead of it stay about this size in the worker's memory."""
HealthDue: TypeAlias = tuple[Role, BatchOutcome, float]
"""A send every message of went through: its namespace, its outcome and when that came (the clock's)."""
LAYOUT_WAIT = 0.5
"""Seconds a new-layout entry waits before the drainer looks again whether the old layout is drained."""
PROBLEM_FULL_WAIT = 5.0
"""Seconds a shard holds before it decides again an entry whose quarantine or dead-letter stream was full."""


def read_count(entry_bytes: float | None) -> int:
    """Entries per read or claim for entries of about ``entry_bytes`` each (None: not known yet)."""
    if not entry_bytes:
        return READ_COUNT
    return max(1, min(READ_COUNT, int(READ_BYTES / entry_bytes)))


@dataclass
class DrainReport:
    """What one drain run did (returned by the task, logged at DEBUG)."""

    entity: str
    shard: int
    sent: int = 0
    dead_lettered: int = 0
    quarantined: int = 0
    retry_after: float | None = None
    packed_ahead: int = 0
    """Batches sent with the messages built and packed with their read (active mode, ``PackedAhead``)."""
    busy: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class HeldFrom:
    """A held key's first pending entry (a claim that decides the key again starts there, not at the
    start of the pending list) and the namespaces whose return, seen for the entity, ends its hold early
    (``bridge.core.seen_back``)."""

    entry_id: str
    awaits: tuple[Role, ...]


def message_id_of(entry: OutboxEntry) -> str | None:
    """The entry's MessageId, None for an entry that could not be decoded."""
    return entry.envelope.message_id if entry.envelope else None


@dataclass(frozen=True)
class ShardTenure:
    """Who this tenure is and the entity's settings it drains by: fixed for the tenure."""

    entity: str
    shard: int
    consumer: str
    """One consumer name per process (stable): the group keeps few consumers."""
    token: str
    """One lease token per tenure (unique): the fence tells this tenure from an earlier or later one of the
    same process."""
    fence: Fence
    mode: str
    """The entity's replication mode."""
    dedup: bool
    """Duplicate detection is on for the entity: the MessageId is an order key (``partition_key``)."""
    lease_ttl: float
    reclaim_interval: float
    """Seconds between claims of the whole pending list from ``0-0`` (``ShardDrainer._reclaim_if_due``)."""
    abandoned_wait: float
    """Seconds nothing newer goes to a path after a send there timed out (0: no such wait)."""


@dataclass
class ShardBackoff:
    """The shard's retry count and when its next batch may start."""

    attempts: int = 0
    """The shard's retry count: read at take-over, counted by each backoff (only this tenure writes it)."""
    not_before: float | None = None
    """No batch starts before this time (the context's clock): a backoff or a planned wait."""
    wake_floor: float | None = None
    """Set while ``not_before`` is a backoff that a namespace seen back may end early, not before this
    time (``bridge.core.backoff.resume_at``); None while the wait is planned and must run out."""
    wake_awaits: frozenset[Role] | None = None
    """The namespaces whose news, about any entity, ends the backoff early
    (``bridge.core.seen_back.backoff_awaits``); news of another namespace leaves it be."""
    retry_state: bool = False
    """A backoff or retry count is kept in Redis for the shard: the next batch that goes through clears it."""


@dataclass
class KeyHolds:
    """Keys this tenure holds back (``Hold``): their entries stay pending until the hold ends."""

    until: dict[str, float] = field(default_factory=dict)
    """Held key -> the time (the context's clock) its hold ends."""
    held_from: dict[str, HeldFrom] = field(default_factory=dict)
    """Per held key: its first pending entry and what may end its hold early (``HeldFrom``)."""


@dataclass
class AbandonedPaths:
    """Paths this shard sends nothing newer to after a send there timed out (``bridge.core.abandoned``)."""

    until: dict[tuple[Role, str], float] = field(default_factory=dict)
    """Path -> the time the wait ends; loaded from Redis when the tenure starts."""
    ids: dict[tuple[Role, str], frozenset[str]] = field(default_factory=dict)
    """The messages this tenure abandoned per path: a send that carries them all may go at once."""


@dataclass
class ReadPosition:
    """Where the tenure reads next: a claim of the pending list or new entries, and how many."""

    reclaim_at: float
    """When this tenure next claims its whole pending list again (the context's clock)."""
    claim_from: str = "0-0"
    """Where the next claim starts: every entry still pending before it belongs to a held key."""
    claiming: bool = True
    """The next read claims pending entries (from ``claim_from``) instead of reading new ones."""
    prune: bool = True
    """The next claim also deletes the group's other consumers that have nothing pending."""
    taken_over: bool = False
    """The tenure took the shard over (its first turn ran): it has a consumer in the group to retire."""
    entry_bytes: float | None = None
    """The mean size of the entries of the last read or claim (``read_count``)."""
    claim_asked: int = READ_COUNT
    """Entries the last claim asked for: one that returned fewer claimed the rest of the pending list."""


@dataclass
class BatchInFlight:
    """What was read with the batch being sent and what its sends recorded, until its settlement."""

    journal: BatchJournal
    """This batch's journal events, written before its entries are settled (``bridge.journal.emit``)."""
    roles: tuple[RoleState, float] | None = None
    """The entity's roles read with this batch's entries and when, on the context's ``monotonic`` clock
    (``ShardSending.observed_roles``)."""
    seen_epoch: int = 0
    """The role epoch of the last swap this tenure asked for, applied or not (kept across batches): roles
    read with entries before it (a batch read ahead while the batch that failed over was sent) are stale."""
    delivered: Mapping[str, bytes] | None = None
    """Where each entry of this batch was already accepted, read with its entries (active mode's
    ``delivered`` hash; ``ShardSending.delivered``); None: not read with them."""
    packed: PackedAhead | None = None
    """Active mode: this batch's messages built and packed with its read (``ShardSending.packed``)."""
    health_due: list[HealthDue] = field(default_factory=list)
    """This batch's sends that every message of went through: their namespaces' health is recorded with
    the batch's settlement (``ShardSending.record_due_health``), behind the drainer when it settles behind,
    as of when each send's outcome came."""
    cost: CostTally = field(default_factory=CostTally)
    """The billable sends not yet counted in Redis: written with the batch's settlement, before its
    acknowledgements, and at a turn's end for sends no settlement took (``ShardSettling.count``)."""

    def take_roles(self) -> tuple[RoleState, float] | None:
        """The roles read with this batch's entries, if any (and forget them: taken once per batch)."""
        roles, self.roles = self.roles, None
        return roles

    def take_delivered(self) -> Mapping[str, bytes] | None:
        """Where this batch's entries were already accepted, if read with them (and forget it)."""
        delivered, self.delivered = self.delivered, None
        return delivered

    def take_packed(self) -> PackedAhead | None:
        """This batch's messages packed with its read, if any (and forget them)."""
        packed, self.packed = self.packed, None
        return packed

    def take_health_due(self) -> list[HealthDue]:
        """The health records this batch owes (and forget them)."""
        due, self.health_due = self.health_due, []
        return due

    def take_cost(self) -> CostTally:
        """The sends counted so far and not yet written (and forget them)."""
        cost, self.cost = self.cost, CostTally()
        return cost


@dataclass(frozen=True)
class SendTally:
    """What one send or one use of the messages packed ahead adds to the batch and the report: the
    collaborator's output (``ShardSending``), folded into the state by the drainer (``ShardDrainer``)."""

    operation: Operation | None = None
    accepted: int = 0
    """Messages ``operation`` sent that were accepted: billable, counted with the batch's settlement."""
    packed_ahead: int = 0


@dataclass(frozen=True)
class SettleTally:
    """What one step of a settlement adds to the report and the batch: the collaborator's output
    (``ShardSettling``), folded into the state by the drainer (``ShardDrainer``) as each step is done."""

    sent: int = 0
    dead_lettered: int = 0
    quarantined: int = 0
    retry_after: float | None = None
    """The report's wait, set to this (a ``Stop``)."""
    wait_at_least: float | None = None
    """The report's wait, raised to at least this (a problem stream full)."""
    notes: tuple[str, ...] = ()
    seen_epoch: int = 0
    """The role epoch a swap this tenure asked for returned (``BatchInFlight.seen_epoch`` keeps the
    highest)."""


@dataclass
class TenureState:
    """One tenure of one shard: what it knows between batches and turns, in groups named for what they
    hold (see the module docstring).

    Only the drainer and the two collaborators it hands the state to read or change it, all on the thread
    that serves the shard's turn; the settler and the read ahead get copies of what they need.
    """

    tenure: ShardTenure
    reading: ReadPosition
    batch: BatchInFlight
    report: DrainReport
    backoff: ShardBackoff = field(default_factory=ShardBackoff)
    holds: KeyHolds = field(default_factory=KeyHolds)
    abandoned: AbandonedPaths = field(default_factory=AbandonedPaths)

    @classmethod
    def begin(
        cls,
        ctx: DeliveryContext,
        entity: str,
        shard: int,
        *,
        consumer: str | None = None,
        token: str | None = None,
    ) -> TenureState:
        """A new tenure's state, before it took the shard over: its names, fence and the entity's settings."""
        consumer = consumer or ctx.identity
        token = token or f"{consumer}:{uuid.uuid4().hex[:8]}"
        settings = ctx.settings
        mode = settings.entity(entity).replication
        names = namespace_names(
            settings.primary.namespace_name if settings.primary else None,
            settings.secondary.namespace_name if settings.secondary else None,
        )
        tenure = ShardTenure(
            entity=entity,
            shard=shard,
            consumer=consumer,
            token=token,
            fence=ctx.leases.fence(entity, shard, token),
            mode=mode,
            dedup=settings.entity(entity).requires_duplicate_detection,
            lease_ttl=settings.workers.lease_ttl,
            reclaim_interval=settings.workers.reclaim_interval,
            abandoned_wait=settings.retry.abandoned_wait,
        )
        return cls(
            tenure=tenure,
            reading=ReadPosition(reclaim_at=ctx.clock() + settings.workers.reclaim_interval),
            batch=BatchInFlight(journal=BatchJournal(names, dual=mode == "active")),
            report=DrainReport(entity, shard),
        )
