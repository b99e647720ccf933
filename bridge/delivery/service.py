"""Event-driven drainers: every worker process owns a fair share of the outbox shards and reads each one as
soon as an entry arrives, with a fixed number of threads and Redis connections however many shards it owns.

Why: a drain that waits for the next sweep (1 s) and a fresh Celery task cost a message about 0.8 s at low
traffic, where a direct SDK send costs 2 ms. Here a shard with a new entry is being read within a
millisecond of the write, and no task or sweep sits in between.

How (one ``DrainService`` per worker process, started by ``workers.app`` after the fork):

- **Ownership by lease, like partitions.** The process registers in ``bridge.state.drainers`` (a heartbeat
  once per tick, about a second) and learns how many drainers are alive, on any host. It holds the leases
  of a fair share of all shards — ``ceil(shards / drainers)``, chosen by rendezvous hashing
  (``bridge.core.shard_assignment``) — and hands shards over when drainers join, takes them when drainers
  leave. One reader per shard is the lease's job: reads, claims, acknowledgements and backoff are fenced
  with the tenure's token (``bridge.delivery.drainer``). The leases are renewed by the ``LeaseKeeper``'s
  thread, during sends too.
- **A bounded pool serves the owned shards** (``bridge.delivery.shard_pool``): two watcher threads block
  in ``XREAD`` over the idle owned shards, and ``workers.drain_threads`` threads run turns of the
  shards that have work. An idle shard costs no thread and no connection.
- **The entity set shrinks**: an entity whose shard 0 this process owns, idle in the pool and in Redis
  (empty, unwritten) for ``workers.entity_idle`` seconds, is removed from the set
  (``bridge.outbox.entities``, race-free with a concurrent write); its shards are handed over at the next
  tick, and its next write lists it again. Every process forgets what it kept for an entity that left the
  set (``forget``: failure streaks, metric label sets, Service Bus senders).
- **Order per key and the other guarantees are unchanged**: one holder per shard, ack only after a
  namespace accepted, a killed process's entries claimed by the next holder when its lease expires
  (``workers.lease_ttl``), a backoff waited out by the holder and respected by everyone.
- **The sweeper is the safety net**: it queues a bounded drain task only for a shard that has entries and
  no holder (a process died and its lease has not expired, an entity no drainer has seen yet, a worker
  pool that runs no drainers).

Idle cost per owned shard: a key in the cold watcher's ``XREAD`` (re-sent every ``BLOCK_MS``, 2 s; for its
first ``HOT_SECONDS`` idle also in the hot watcher's) and one lease renewal per third of
``workers.lease_ttl`` (pipelined); per process one heartbeat per tick, one ``SMEMBERS`` of the entity set
and one pipelined read of their layouts, and, only while it holds less than its share, a pipelined
``EXISTS`` of the other shards' leases (at most ``PROBES_PER_SECOND`` keys a second). A process runs
``drain_threads`` + 4 threads of its own (and up to 8 settling and 8 read-ahead threads shared by its
drainers) whatever it owns.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from bridge.core.shard_assignment import ShardRef, plan_assignment
from bridge.delivery.context import DeliveryContext
from bridge.delivery.lease_keeper import LeaseKeeper
from bridge.delivery.shard_pool import ShardPool
from bridge.errors import StateStoreUnavailableError
from bridge.observability import metrics
from bridge.outbox.entities import EntitySet
from bridge.state.drainers import DrainerRegistry

log = logging.getLogger(__name__)

PROBES_PER_SECOND = 1000
"""How many other shards' leases a process below its share checks per second (a pipelined ``EXISTS``)."""
ACQUIRES_PER_TICK = 256
"""Leases one tick takes at most (one round trip each), so the renewals of those it took are never late."""
BLOCK_MS = 2000
"""How long the watcher blocks in one ``XREAD`` over the idle shards (stays below the client's 5 s socket
timeout): how often the command is sent again while nothing comes in."""


class DrainService:
    """The drainers of one worker process (see the module docstring)."""

    def __init__(
        self,
        ctx: DeliveryContext,
        *,
        block_ms: int = BLOCK_MS,
        tick: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        threads: int | None = None,
    ) -> None:
        self.ctx = ctx
        self.block_ms = block_ms
        self.lease_ttl = ctx.settings.workers.lease_ttl
        self.tick_seconds = tick if tick is not None else min(1.0, self.lease_ttl / 6)
        # Members drop out of the count well before their leases expire, so survivors' shares have grown
        # by the time an orphaned lease frees its shard.
        self.heartbeat_ms = int(1000 * max(3 * self.tick_seconds, self.lease_ttl / 2))
        self.member = f"{ctx.identity}:{uuid.uuid4().hex[:6]}"
        self.keeper = LeaseKeeper(ctx.leases, self.lease_ttl, clock)
        self.registry = DrainerRegistry(ctx.redis)
        self.clock = clock
        workers = ctx.settings.workers
        self.pool = ShardPool(
            ctx,
            self.keeper,
            self.member,
            threads=threads or workers.drain_threads,
            block_ms=block_ms,
            clock=clock,
        )
        self.entity_set = EntitySet(ctx.redis)
        self.entity_idle = workers.entity_idle
        self._next_retire = 0.0
        self._listed: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_probe = 0.0
        self._probe_every = self.tick_seconds
        self._probed_with = 0
        self.drainers = 1

    # ---- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> DrainService:
        """Start the coordinating thread (it takes shards at its first tick)."""
        self.pool.start()
        # Renewals on a thread of their own: a tick that takes many leases at once must not delay them.
        self.keeper.keep_alive(self._stop)
        self._thread = threading.Thread(target=self._loop, name="bridge-drain-service", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Hand every shard over (each drainer finishes its batch and releases its lease) and leave."""
        self._stop.set()
        deadline = self.clock() + timeout
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - self.clock()))
        self.pool.stop(max(0.0, deadline - self.clock()))
        try:
            self.registry.leave(self.member)
        except StateStoreUnavailableError as exc:
            log.warning("drain service did not leave the registry: %s", exc)

    def owned(self) -> list[ShardRef]:
        """The shards this process serves now."""
        return self.pool.owned()

    def _loop(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self.tick()
                if failing:
                    log.warning("drain service: Redis answers again")
                failing = False
            except StateStoreUnavailableError as exc:
                # Once per outage at WARNING; the drainers' own messages say the rest.
                log.log(logging.DEBUG if failing else logging.WARNING, "drain service tick failed: %s", exc)
                failing = True
            except Exception:  # the coordinator must outlive any one failure
                log.exception("drain service tick failed")
            self._stop.wait(self.tick_seconds)

    # ---- one tick ----------------------------------------------------------------------------------
    def tick(self) -> None:
        """Heartbeat, reap lost leases, retire idle entities, hand over the excess, take free shards up to the
        share (the keeper renews the leases meanwhile, on its own thread)."""
        self.drainers = self.registry.heartbeat(self.member, self.heartbeat_ms)
        self.pool.reap_lost()
        self.retire_idle_entities()
        owned = self.pool.owned()
        shards = self.known_shards()
        plan = plan_assignment(self.member, shards, owned, self.drainers)
        for ref in plan.release:
            self.pool.hand_over(ref)
        keeping = len(owned) - len(plan.release)
        if keeping >= plan.fair or not plan.candidates or self._stop.is_set():
            return
        now = self.clock()
        if self.drainers != self._probed_with:  # someone joined or left: shards change hands now
            self._probed_with, self._probe_every, self._next_probe = self.drainers, self.tick_seconds, now
        if now < self._next_probe:
            return
        free = self.ctx.leases.free(list(plan.candidates))
        # Below the smallest share (shards // drainers) a shard is free or about to be: look every tick.
        # At it, the free shards are the remainder only, so look less and less often while none is.
        if free or keeping < len(shards) // max(1, self.drainers):
            self._probe_every = self.tick_seconds
        else:
            self._probe_every = min(2 * self._probe_every, self.lease_ttl / 2)
        spread = len(plan.candidates) / PROBES_PER_SECOND
        self._next_probe = now + max(self._probe_every, spread)
        taken = 0
        for entity, shard in free:
            if keeping >= plan.fair:
                break
            if taken >= ACQUIRES_PER_TICK:
                self._next_probe = now  # more are free: go on at the next tick, after the renewals
                break
            taken += 1
            token = f"{self.ctx.identity}:{uuid.uuid4().hex[:8]}"
            held = self.keeper.acquire(entity, shard, token)
            if held is None:
                continue
            self.pool.add(held)
            keeping += 1
            log.debug("drainer %s took %s shard %d", self.member, entity, shard)

    def known_shards(self) -> list[ShardRef]:
        """Every shard of every configured entity and of every entity in the set (written to, not retired);
        what this process kept for an entity that left the set since the last look is forgotten."""
        listed = set(self.ctx.settings.entities) | set(self.entity_set.members())
        for entity in sorted(self._listed - listed):
            self.forget(entity)
        self._listed = listed
        entities = sorted(listed)
        counts = self.ctx.reader.shard_counts(entities)
        return [(entity, shard) for entity in entities for shard in range(counts[entity])]

    def forget(self, entity: str) -> None:
        """Free what this process holds for a retired ``entity``: its failure streaks, its label sets in the
        per-process metrics and its Service Bus senders (those a send holds go once idle)."""
        self.ctx.streaks.forget(entity)
        removed = metrics.forget_entity(entity)
        self.ctx.pool.forget(entity)
        log.debug("entity %s retired: forgot its streaks, senders and %d metric label sets", entity, removed)

    def retire_idle_entities(self) -> None:
        """Remove from the entity set the entities not named in the settings whose shard 0 this process
        has watched, empty, for ``workers.entity_idle`` seconds and that Redis finds empty and unwritten
        as long (``bridge.outbox.entities``); looked at every tenth of that time at most."""
        now = self.clock()
        if now < self._next_retire:
            return
        self._next_retire = now + max(self.tick_seconds, self.entity_idle / 10)
        configured = self.ctx.settings.entities
        for entity, shard in self.pool.owned():
            since = self.pool.idle_since((entity, shard))
            if shard != 0 or entity in configured or since is None or now - since < self.entity_idle:
                continue
            shards = self.ctx.reader.shards(entity)
            if self.entity_set.retire_if_idle(entity, shards, self.entity_idle):
                log.info("entity %s: empty and idle for %.0fs, no longer watched", entity, self.entity_idle)
