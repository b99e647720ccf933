"""Event-driven drainers: every worker process owns a fair share of the outbox shards and reads each one as
soon as an entry arrives.

Why: a drain that waits for the next sweep (1 s) and a fresh Celery task cost a message about 0.8 s at low
traffic, where a direct SDK send costs 2 ms. Here a shard with a new entry is being read within a
millisecond of the write, and no task, sweep or wake-up message sits in between.

How (one ``DrainService`` per worker process, started by ``workers.app`` after the fork):

- **Ownership by lease, like partitions.** The process registers in ``bridge.state.drainers`` (a heartbeat
  once per tick, about a second) and learns how many drainers are alive, on any host. It holds the leases
  of a fair share of all shards — ``ceil(shards / drainers)``, chosen by rendezvous hashing
  (``bridge.core.shard_assignment``) — and hands shards over when drainers join, takes them when drainers
  leave. One reader per shard is the lease's job: reads, claims, acknowledgements and backoff are fenced
  with the tenure's token (``bridge.delivery.drainer``).
- **One thread per owned shard** runs ``ShardDrainer.serve``: ``XREAD BLOCK`` after the group's
  last-delivered id (it returns within a millisecond of an ``XADD``), then a fenced ``XREADGROUP`` and the
  batched send. The lease is renewed by this service's tick (``LeaseKeeper``), during sends too.
- **Order per key and the other guarantees are unchanged**: one holder per shard, ack only after a
  namespace accepted, a killed process's entries claimed by the next holder when its lease expires
  (``workers.lease_ttl``), a backoff waited out by the holder and respected by everyone.
- **The sweeper is the safety net**: it queues a bounded drain task only for a shard that has entries and
  no holder (a process died and its lease has not expired, an entity no drainer has seen yet, a worker
  pool that runs no drainers).

Weighed and not chosen: a wake-up published by the write path on a shard's idle-to-busy transition (a
``SET NX`` in the write script and a wake-up list that dispatchers block on). It costs nothing per idle
shard, but puts a second hop (wake-up, lease, claim) before every first message, needs a lost-wake-up
protocol at every exit of a drain, and touches every writer (HTTP, Producer, Redis door). Blocking readers
that own their shards need none of that; their idle cost is measured by ``python -m bench.latency``.

Idle cost per owned shard: one ``XREAD`` per ``BLOCK_MS`` (2 s) and one lease renewal per third of
``workers.lease_ttl``; per process one heartbeat per tick, one ``SMEMBERS`` of the entity set, and, only
while it holds less than its share, a pipelined ``EXISTS`` of the other shards' leases (at most
``PROBES_PER_SECOND`` keys a second). A process owning N shards runs N + 1 threads and keeps N blocked Redis
connections.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from bridge.core.shard_assignment import ShardRef, plan_assignment
from bridge.delivery.context import DeliveryContext
from bridge.delivery.drainer import BLOCK_MS, ShardDrainer
from bridge.delivery.lease_keeper import HeldLease, LeaseKeeper
from bridge.errors import LeaseLostError, StateStoreUnavailableError
from bridge.state.drainers import DrainerRegistry

log = logging.getLogger(__name__)

PROBES_PER_SECOND = 100
"""How many other shards' leases a process below its share checks per second (a pipelined ``EXISTS``)."""


class _OwnedShard:
    """The thread that serves one owned shard, and how to make it hand the shard over."""

    def __init__(self, service: DrainService, held: HeldLease) -> None:
        self.service = service
        self.held = held
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, name=f"bridge-drain-{held.entity}-{held.shard}", daemon=True
        )

    def _run(self) -> None:
        service, held = self.service, self.held
        delay = 0.5
        drainer: ShardDrainer | None = None
        try:
            while not self.stop.is_set() and not held.lost.is_set():
                drainer = ShardDrainer(service.ctx, held.entity, held.shard, token=held.token)
                try:
                    drainer.serve(held, self.stop, service.block_ms)
                    delay = 0.5
                except LeaseLostError:
                    held.lost.set()
                except StateStoreUnavailableError as exc:
                    log.warning("%s shard %d: Redis failed, retrying: %s", held.entity, held.shard, exc)
                    self.stop.wait(delay)
                    delay = min(delay * 2, 5.0)
                except Exception:  # a bug in one batch must not end the shard's drainer for good
                    log.exception("entity %s shard %d: drain failed, retrying", held.entity, held.shard)
                    self.stop.wait(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            if held.lost.is_set():
                log.warning("entity %s shard %d: lease passed to another drainer", held.entity, held.shard)
                service.keeper.forget(held)
            elif drainer is not None:
                drainer.let_go(service.keeper, held)
            else:
                service.keeper.forget(held)


class DrainService:
    """The drainers of one worker process (see the module docstring)."""

    def __init__(
        self,
        ctx: DeliveryContext,
        *,
        block_ms: int = BLOCK_MS,
        tick: float | None = None,
        clock: Callable[[], float] = time.monotonic,
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
        self._owned: dict[ShardRef, _OwnedShard] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_probe = 0.0
        self._probe_every = self.tick_seconds
        self._probed_with = 0
        self.drainers = 1

    # ---- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> DrainService:
        """Start the coordinating thread (it takes shards at its first tick)."""
        self._thread = threading.Thread(target=self._loop, name="bridge-drain-service", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Hand every shard over (each drainer finishes its batch and releases its lease) and leave."""
        self._stop.set()
        for owned in list(self._owned.values()):
            owned.stop.set()
        deadline = self.clock() + timeout
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - self.clock()))
        for owned in list(self._owned.values()):
            owned.thread.join(max(0.0, deadline - self.clock()))
        try:
            self.registry.leave(self.member)
        except StateStoreUnavailableError as exc:
            log.warning("drain service did not leave the registry: %s", exc)

    def owned(self) -> list[ShardRef]:
        """The shards this process serves now."""
        return sorted(ref for ref, owned in self._owned.items() if owned.thread.is_alive())

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
        """Heartbeat, renew, reap stopped drainers, hand over the excess, take free shards up to the share."""
        self.keeper.renew_due()
        self.drainers = self.registry.heartbeat(self.member, self.heartbeat_ms)
        for ref, owned in list(self._owned.items()):
            if not owned.thread.is_alive():
                del self._owned[ref]
        shards = self.known_shards()
        plan = plan_assignment(self.member, shards, list(self._owned), self.drainers)
        for ref in plan.release:
            self._owned[ref].stop.set()
        keeping = len(self._owned) - len(plan.release)
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
        for entity, shard in free:
            if keeping >= plan.fair:
                break
            token = f"{self.ctx.identity}:{uuid.uuid4().hex[:8]}"
            held = self.keeper.acquire(entity, shard, token)
            if held is None:
                continue
            owned = _OwnedShard(self, held)
            self._owned[(entity, shard)] = owned
            owned.thread.start()
            keeping += 1
            log.debug("drainer %s took %s shard %d", self.member, entity, shard)

    def known_shards(self) -> list[ShardRef]:
        """Every shard of every configured entity and of every entity that ever had an outbox write."""
        reader = self.ctx.reader
        entities = set(self.ctx.settings.entities) | set(reader.entities())
        return [(entity, shard) for entity in sorted(entities) for shard in range(reader.shards(entity))]
