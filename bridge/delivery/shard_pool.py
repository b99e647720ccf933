"""Serving every shard a process owns with a fixed number of threads and Redis connections.

Why: a thread per owned shard, each with a Redis connection blocked in ``XREAD``, made threads and
connections grow with the number of entities; a few thousand entity names exhausted the client's connection
pool and stopped delivery for most of them. Here the cost of an owned shard that has nothing to send is an
entry in a dictionary and a key in one ``XREAD``.

How (one ``ShardPool`` per ``DrainService``):

- **Two watcher threads** block in ``XREAD BLOCK`` over the streams of the idle owned shards, each after the
  id its last read stopped at (``OutboxReader.wait_for_any``), and put the shards with new entries in the
  run queue; an ``XREAD`` returns within a millisecond of an ``XADD`` to any of its streams. The *cold*
  watcher covers every idle shard with one ``XREAD`` per ``block_ms``. The *hot* watcher covers the shards
  that went idle within ``HOT_SECONDS``: a shard going idle pokes it through the process's wake stream
  (``keys.drain_wake``), so the next ``XREAD`` includes that shard at once, and the command sent again on
  every poke stays small however many shards are idle (sending one ``XREAD`` over thousands of streams on
  every poke made the process spend its time there). Entries written before an ``XREAD`` that includes
  their shard are found by the id it starts after, never missed. The hot watcher also queues the shards
  that wait for a time (a backoff, a held key coming due, doubt about the lease) when it comes, blocking
  no longer than until the earliest.
- **``workers.drain_threads`` worker threads** take shards from the run queue, one at a time each, and run
  one *turn* of the shard's ``ShardDrainer`` (``bridge.delivery.drainer``): claim and read until the shard
  is empty, must wait, or ``TURN_BUDGET`` seconds passed (then it goes to the back of the queue, so a busy
  shard does not starve the others).
- **A namespace seen back ends the backoffs** (``bridge.core.backoff``, ``bridge.state.resume``): the hot
  watcher's ``XREAD`` also waits on the deployment's namespace-back stream, and an entry there (any worker's
  send accepted after failures, a probe, a ping) makes every shard backing off for the namespace it names
  (about any entity: ``bridge.core.seen_back.backoff_awaits``) try at once — or, if it inherited an abandoned
  send's wait, when that ends — and every shard with keys held for the namespace and entity the entry names
  decide them again (``bridge.core.seen_back``: news about another entity claims none of them); the links of
  their entities are made again in the background (``NamespacePool.reopen``), all at once instead of each when
  a batch first needs it. A turn that ends in a backoff or with holds after such news came during it is woken
  as it is placed. While some shard backs off, the watcher asks once per ``retry.outbox_scout_interval`` to be
  the deployment's scout and, if it is, wakes one of them (its backoff ends, its holds do not): that early try
  is what sees a namespace back when nobody else sends. While a namespace's address refuses connections, the
  watcher also connects to it every ``retry.outbox_door_watch`` seconds and has one backing-off shard try the
  moment it accepts (``bridge.core.reachability``).
- **Every guarantee is the drainer's, unchanged**: one holder per shard (its lease, renewed by the service's
  ``LeaseKeeper`` whatever the shard is doing), the tenure's state kept between turns (held keys, the
  claim position, backoff, abandoned sends), a shard never in two turns at once, fenced writes,
  acknowledgement only after a namespace accepted.

Threads per process: ``drain_threads`` + 2 watchers + the service's coordinator, up to 8 settling threads
(``bridge.delivery.settler``) and up to 8 read-ahead threads (``bridge.delivery.read_ahead``), both shared
by all drainers; Redis connections at most as many, whatever the number of shards.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass

from bridge.core.backoff import scout_due
from bridge.core.replication import links_to_reopen
from bridge.core.roles import Role
from bridge.core.seen_back import NOTHING, SeenBack
from bridge.core.shard_assignment import ShardRef
from bridge.delivery.context import DeliveryContext
from bridge.delivery.drainer import ShardDrainer, TurnEnd
from bridge.delivery.lease_keeper import HeldLease, LeaseKeeper
from bridge.errors import LeaseLostError, StateStoreUnavailableError
from bridge.outbox import keys

log = logging.getLogger(__name__)

TURN_BUDGET = 1.0
"""Seconds one turn may drain a busy shard before the thread serves the next shard in the queue."""
CLUSTER_POLL = 0.1
"""Seconds between looks at idle shards on a Redis Cluster (one ``XREAD`` cannot span its slots)."""
HOT_SECONDS = 5.0
"""How long a shard that went idle stays in the hot watcher's ``XREAD`` (which is sent again whenever a
shard goes idle); the cold watcher's covers it from its next ``XREAD`` on (within ``block_ms``)."""
WAKE_TTL_MS = 60_000
"""How long a process's wake stream outlives its last wake-up (it is deleted at a clean stop)."""


@dataclass
class _Slot:
    """One owned shard: its lease, its drainer (the tenure's state) and where it is in the pool."""

    held: HeldLease
    drainer: ShardDrainer
    state: str = "queued"
    """``queued`` (in the run queue), ``running`` (in a turn), ``idle`` (watched for new entries) or
    ``waiting`` (until ``at``)."""
    after: str = "0-0"
    at: float | None = None
    handing_over: bool = False
    idle_since: float | None = None
    failures: int = 0
    news: SeenBack = NOTHING
    """News of namespaces seen back that came while the shard was queued (applied as its turn starts) or in
    a turn (applied to the wait that turn ends with)."""


class ShardPool:
    """The threads that serve one process's owned shards (see the module docstring)."""

    def __init__(
        self,
        ctx: DeliveryContext,
        keeper: LeaseKeeper,
        member: str,
        *,
        threads: int,
        block_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ctx = ctx
        self.keeper = keeper
        self.block_ms = block_ms
        self.clock = clock
        self.member = member
        self.wake_key = keys.drain_wake(member)
        self._wake_after = "0-0"
        self._back_after: str | None = None
        """The namespace-back stream's last id read (None: not read yet; ``ResumeSignals``)."""
        self._last_scout: float | None = None
        self.scout_interval = ctx.settings.retry.outbox_scout_interval
        self.door_watch = ctx.settings.retry.outbox_door_watch
        self._last_door: float | None = None
        self._door_shut = False  # a namespace's address refused connections at the door watch's last look
        self._slots: dict[ShardRef, _Slot] = {}
        self._ready: deque[ShardRef] = deque()
        self._lock = threading.Condition()
        self._watching = False
        self._poked = threading.Event()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"bridge-drain-{n}", daemon=True) for n in range(threads)
        ]
        self._threads += [
            threading.Thread(target=self._watch, args=(hot,), name=f"bridge-drain-watch-{name}", daemon=True)
            for hot, name in ((True, "hot"), (False, "cold"))
        ]

    # ---- what the service asks -----------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker threads and the watchers."""
        for thread in self._threads:
            thread.start()

    def add(self, held: HeldLease) -> None:
        """Serve a shard whose lease was just taken: its first turn takes it over and claims what is
        pending."""
        drainer = ShardDrainer(self.ctx, held.entity, held.shard, token=held.token)
        with self._lock:
            self._slots[(held.entity, held.shard)] = _Slot(held, drainer)
            self._ready.append((held.entity, held.shard))
            self._lock.notify()

    def hand_over(self, ref: ShardRef) -> None:
        """Stop serving ``ref`` and release its lease: now when it is between turns, else after its turn."""
        with self._lock:
            slot = self._slots.get(ref)
            if slot is None:
                return
            if slot.state == "running":
                slot.handing_over = True
                return
            self._remove(ref)
        self._let_go(slot)

    def owned(self) -> list[ShardRef]:
        """The shards this pool serves now."""
        with self._lock:
            return sorted(self._slots)

    def idle_since(self, ref: ShardRef) -> float | None:
        """Since when (this pool's clock) ``ref`` has been empty and watched; None when it is not."""
        with self._lock:
            slot = self._slots.get(ref)
            return slot.idle_since if slot is not None and slot.state == "idle" else None

    def reap_lost(self) -> None:
        """Forget shards whose lease passed to another drainer while they were between turns."""
        with self._lock:
            lost = [ref for ref, s in self._slots.items() if s.held.lost.is_set() and s.state != "running"]
            slots = [self._remove(ref) for ref in lost]
        for slot in slots:
            log.warning(
                "entity %s shard %d: lease passed to another drainer", slot.held.entity, slot.held.shard
            )
            self.keeper.forget(slot.held)

    def stop(self, timeout: float) -> None:
        """Finish the turns in progress, release every lease and stop the threads."""
        self._stop.set()
        self._poked.set()
        with self._lock:
            self._lock.notify_all()
        self._poke()
        deadline = self.clock() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - self.clock()))
        with self._lock:
            slots = [self._remove(ref) for ref in list(self._slots)]
        for slot in slots:
            self._let_go(slot)
        try:
            self.ctx.redis.delete(self.wake_key)
        except Exception as exc:  # best effort: the stream expires on its own
            log.debug("wake stream not deleted: %s", exc)

    # ---- worker threads ------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._ready and not self._stop.is_set():
                    self._lock.wait(1.0)
                if self._stop.is_set():
                    return
                ref = self._ready.popleft()
                slot = self._slots.get(ref)
                if slot is None or slot.state != "queued":
                    continue
                slot.state, slot.idle_since = "running", None
                news, slot.news = slot.news, NOTHING
                if news:  # it came while the shard was queued: this turn claims what it ends
                    slot.drainer.wake(news)
            end = self._turn(slot)
            self._after_turn(ref, slot, end)

    def _turn(self, slot: _Slot) -> TurnEnd | None:
        """One turn of the shard; None when its lease is gone. A failure is retried after a growing wait."""
        held = slot.held
        try:
            end = slot.drainer.turn(held, self._stop, TURN_BUDGET)
            slot.failures = 0
            return end
        except LeaseLostError:
            held.lost.set()
            return None
        except StateStoreUnavailableError as exc:
            log.warning("%s shard %d: Redis failed, retrying: %s", held.entity, held.shard, exc)
        except Exception:  # a bug in one batch must not end the shard's service for good
            log.exception("entity %s shard %d: drain failed, retrying", held.entity, held.shard)
        slot.failures += 1
        # The next turn takes the shard over again: it claims what the failed one left pending.
        slot.drainer = ShardDrainer(self.ctx, held.entity, held.shard, token=held.token)
        return TurnEnd(None, min(0.5 * 2 ** (slot.failures - 1), 5.0))

    def _after_turn(self, ref: ShardRef, slot: _Slot, end: TurnEnd | None) -> None:
        """Put the shard where its turn's end says: watched, queued again, waiting, or let go."""
        with self._lock:
            if slot.state == "gone":  # let go by ``stop`` while this turn outran its wait
                return
            done = end is None or slot.handing_over or self._stop.is_set()
            poke = False
            if done and self._slots.get(ref) is slot:
                self._remove(ref)
            elif end is not None:
                poke = self._place(ref, slot, end)
        if end is None:
            log.warning("entity %s shard %d: lease passed to another drainer", *ref)
            self.keeper.forget(slot.held)
        elif done:
            self._let_go(slot)
        elif poke:
            self._poke()

    def _place(self, ref: ShardRef, slot: _Slot, end: TurnEnd) -> bool:
        """(Under the lock.) Where the shard goes after ``end``; True when the watcher must look again."""
        now = self.clock()
        if slot.news and (end.backoff or end.after is not None):
            # Namespaces were seen back during this turn: the backoff or holds it ends with end as the
            # others' did (any other end queues the shard soon, and its next turn takes the news).
            news, slot.news = slot.news, NOTHING
            woken = slot.drainer.wake(news)
            end = end if woken is None else TurnEnd(None, woken, backoff=end.backoff)
        slot.at = None if end.wait is None else now + end.wait
        if end.after is not None:
            slot.state, slot.after, slot.idle_since = "idle", end.after, now
            return self._watching
        if slot.at is None or slot.at <= now:
            slot.state = "queued"
            self._ready.append(ref)
            self._lock.notify()
            return False
        slot.state = "waiting"
        return self._watching

    # ---- the watchers --------------------------------------------------------------------------------
    def _watch(self, hot: bool) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self._watch_once() if hot else self._watch_cold()
                failing = False
            except StateStoreUnavailableError as exc:
                log.log(logging.DEBUG if failing else logging.WARNING, "shard watcher: Redis failed: %s", exc)
                failing = True
                self._stop.wait(0.5)
            except Exception:  # a watcher must outlive any one failure
                log.exception("shard watcher failed")
                self._stop.wait(0.5)

    def _watch_once(self) -> None:
        """The hot watcher: the shards that went idle within ``HOT_SECONDS``, poked when one goes idle, the
        shards waiting for a time (on a Cluster: every idle shard, polled), and the namespace-back news."""
        self._scout()
        self._watch_door()
        if self._back_after is None:
            self._back_after = self.ctx.resume.last_id()
        back = self.ctx.resume.key
        with self._lock:
            now = self.clock()
            for ref, slot in self._slots.items():
                if slot.state in ("idle", "waiting") and slot.at is not None and slot.at <= now:
                    self._queue(ref, slot)
            cluster = self.ctx.reader.cluster
            after = {
                ref: s.after
                for ref, s in self._slots.items()
                if s.state == "idle" and (cluster or now - (s.idle_since or now) < HOT_SECONDS)
            }
            times = [
                s.at for s in self._slots.values() if s.state in ("idle", "waiting") and s.at is not None
            ]
            backing = bool(self._backing_off())
            if backing and self.scout_interval is not None:
                times.append((self._last_scout or now) + self.scout_interval)
            if backing and self._door_shut and self.door_watch is not None:
                times.append((self._last_door or now) + self.door_watch)
            wait = max(0.0, min([self.block_ms / 1000, *(at - now for at in times)]))
            self._watching = True
            self._poked.clear()
        try:
            if cluster:
                ready, woken = self.ctx.reader.wait_for_any(after, 0, {back: self._back_after})
                if not ready and back not in woken:
                    self._poked.wait(min(wait, CLUSTER_POLL) if after or backing else wait)
            else:
                wakes = {self.wake_key: self._wake_after, back: self._back_after}
                ready, woken = self.ctx.reader.wait_for_any(after, max(1, int(wait * 1000)), wakes)
                self._wake_after = woken.get(self.wake_key, self._wake_after)
        finally:
            with self._lock:
                self._watching = False
        if back in woken:
            news, self._back_after = self.ctx.resume.news_after(self._back_after)
            if news:
                self._namespace_back(news)
        self._queue_ready(ready)

    # ---- backoffs that end early ---------------------------------------------------------------------
    def _backing_off(self) -> list[ShardRef]:
        """(Under the lock.) The waiting shards whose backoff may end now: the scout's candidates."""
        return [
            ref
            for ref, s in self._slots.items()
            if s.state == "waiting"
            and s.drainer.state.backoff.wake_floor is not None
            and s.drainer.state.backoff.wake_floor <= s.drainer.ctx.clock()
        ]

    def _namespace_back(self, news: SeenBack) -> None:
        """Namespaces were seen back (by any worker): every shard backing off for one of them tries now, and
        so does every shard with a held key that waits for what ``news`` names (``bridge.core.seen_back``);
        a shard in a turn or queued for one takes the news with it."""
        woken: list[ShardRef] = []
        with self._lock:
            for ref, slot in self._slots.items():
                if slot.state in ("queued", "running"):
                    slot.news = slot.news | news
                    continue
                # Waiting (a backoff, maybe) or idle with a time (a held key coming due).
                timed = slot.state == "waiting" or (slot.state == "idle" and slot.at is not None)
                if timed and self._wake(ref, slot, news):
                    woken.append(ref)
        if woken:
            log.info("a namespace is back: %d backing-off shard(s) try again now", len(woken))
        self._reopen_links(woken)

    def _reopen_links(self, refs: list[ShardRef], roles: Collection[Role] | None = None) -> None:
        """Have the links of ``refs``' entities (to ``roles`` only, if given) made again in the background:
        they went with the outage, and made all at once now no batch waits for its own (an active shard's
        first batch may go to one namespace only)."""
        modes = {entity: self.ctx.settings.entity(entity).replication for entity, _ in refs}
        for role, entity in links_to_reopen(modes, self.ctx.settings.workers.max_senders):
            if roles is None or role in roles:
                self.ctx.pool.reopen(role, entity)

    def _scout(self) -> None:
        """Once per ``scout_interval`` while some shard backs off: if this process is the deployment's
        scout (``ResumeSignals.claim_scout``), one of its backing-off shards, chosen at random, tries now."""
        with self._lock:
            now = self.clock()
            if not scout_due(self._last_scout, now, self.scout_interval):
                return
            candidates = self._backing_off()
            if not candidates:
                return
            self._last_scout = now
        assert self.scout_interval is not None  # scout_due is False without one
        if not self.ctx.resume.claim_scout(self.member, self.scout_interval):
            return
        ref = random.choice(candidates)
        with self._lock:
            slot = self._slots.get(ref)
            if slot is not None and slot.state == "waiting":
                self._wake(ref, slot, NOTHING)

    def _watch_door(self) -> None:
        """Every ``door_watch`` seconds while some shard backs off: whether a namespace's address that
        refused connections accepts one again (``ConnectProbe.accepting_again``, ``bridge.core.
        reachability``); if so, one of this process's backing-off shards, chosen at random, tries now."""
        if self.door_watch is None:
            return
        with self._lock:
            now = self.clock()
            if self._last_door is not None and now - self._last_door < self.door_watch:
                return
            self._last_door = now
            candidates = self._backing_off()
        if not candidates:
            self._door_shut = False
            return
        probe = self.ctx.pool.connect_probe
        back = probe.accepting_again()
        self._door_shut = bool(probe.shut_roles())
        if not back:
            return
        ref = random.choice(candidates)
        with self._lock:
            slot = self._slots.get(ref)
            woken = slot is not None and slot.state == "waiting" and self._wake(ref, slot, NOTHING)
        if woken:
            log.info("the %s address accepts connections again: shard %s tries now", "/".join(back), ref)
        # The others wait for that try's news; their links to what is back are made meanwhile.
        self._reopen_links(candidates, back)

    def _wake(self, ref: ShardRef, slot: _Slot, news: SeenBack) -> bool:
        """(Under the lock; ``slot`` is between turns.) End its backoff, and the holds ``news`` ends, early;
        True when it had either. It is queued at once, or waits for what the backoff must keep."""
        wait = slot.drainer.wake(news)
        if wait is None:
            return False
        if wait <= 0:
            self._queue(ref, slot)
        else:
            slot.at = self.clock() + wait
        return True

    def _watch_cold(self) -> None:
        """The cold watcher: every idle shard, one ``XREAD`` per ``block_ms``, never poked (on a Cluster
        the hot watcher polls them all instead)."""
        with self._lock:
            after = {ref: s.after for ref, s in self._slots.items() if s.state == "idle"}
        if not after or self.ctx.reader.cluster:
            self._stop.wait(self.block_ms / 1000)
            return
        self._queue_ready(self.ctx.reader.wait_for_any(after, self.block_ms)[0])

    def _queue_ready(self, ready: list[ShardRef]) -> None:
        with self._lock:
            for ref in ready:
                slot = self._slots.get(ref)
                if slot is not None and slot.state == "idle":
                    self._queue(ref, slot)

    def _queue(self, ref: ShardRef, slot: _Slot) -> None:
        """(Under the lock.) Put the shard in the run queue."""
        slot.state, slot.at = "queued", None
        self._ready.append(ref)
        self._lock.notify()

    def _poke(self) -> None:
        """End the watcher's current wait so that its next one includes the shards that changed."""
        self._poked.set()
        if self.ctx.reader.cluster:
            return
        try:
            pipe = self.ctx.redis.pipeline(transaction=False)
            pipe.xadd(self.wake_key, {"w": "1"}, maxlen=8, approximate=False)
            pipe.pexpire(self.wake_key, WAKE_TTL_MS)
            pipe.execute()
        except Exception as exc:  # the watcher's wait ends by itself within ``block_ms``
            log.debug("watcher not woken: %s", exc)

    # ---- helpers ------------------------------------------------------------------------------------
    def _remove(self, ref: ShardRef) -> _Slot:
        """(Under the lock.) Stop tracking the shard's slot; it is marked gone for a turn still running."""
        slot = self._slots.pop(ref)
        slot.state = "gone"
        return slot

    def _let_go(self, slot: _Slot) -> None:
        drainer = slot.drainer
        if slot.held.lost.is_set():
            self.keeper.forget(slot.held)
        else:
            drainer.let_go(self.keeper, slot.held)
