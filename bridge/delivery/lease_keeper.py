"""Keeping shard leases alive while their drainers work, and knowing when one is no longer safe to use.

A drainer may spend long in one batch (two SDK calls of up to ``retry.attempt_deadline`` each, for up to
``READ_COUNT`` entries), so renewing only between batches let a lease expire mid-batch. The keeper renews
every held lease every third of its TTL from its own thread, whatever the drainers are doing, and tracks
for each lease how long it is certainly still ours (``valid_until``: the time the last successful renewal
was *sent*, plus the TTL). A drainer checks ``HeldLease.usable`` before it starts a send and pauses while
renewals fail (Redis unreachable); a renewal answered "not yours" marks the lease ``lost`` and the drainer
stops. Whatever slips through — a process frozen past its TTL — is stopped by the fences: every write that
assumes ownership checks the lease token in Redis (``bridge.state.lease.Fence``).

Times are ``time.monotonic`` seconds of this process; Redis measures the TTL on its own clock, which only
matters for the margin (a third of the TTL).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from bridge.errors import StateStoreUnavailableError
from bridge.redis.fence import Fence
from bridge.state.lease import LeaseStore

log = logging.getLogger(__name__)

RENEW_BATCH = 500
"""Leases renewed per pipelined round trip."""


class HeldLease:
    """One shard lease this process took, with the token of this tenure."""

    def __init__(self, entity: str, shard: int, token: str, ttl: float, clock: Callable[[], float]) -> None:
        self.entity = entity
        self.shard = shard
        self.token = token
        self.ttl = ttl
        self.clock = clock
        self.renewed_at = clock()
        self.valid_until = self.renewed_at + ttl
        self.lost = threading.Event()

    @property
    def fence(self) -> Fence:
        """The fence of this tenure, for the writes that assume ownership."""
        return LeaseStore.fence(self.entity, self.shard, self.token)

    def usable(self) -> bool:
        """Not lost, and certainly ours for at least another third of the TTL (time to start a send)."""
        return not self.lost.is_set() and self.clock() + self.ttl / 3 < self.valid_until


class LeaseKeeper:
    """Acquires, renews (``renew_due``) and releases shard leases for the drainers of one process."""

    def __init__(self, leases: LeaseStore, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.leases = leases
        self.ttl = ttl
        self.ttl_ms = max(1, int(ttl * 1000))
        self.clock = clock
        self._held: dict[tuple[str, int], HeldLease] = {}
        self._lock = threading.Lock()

    def acquire(self, entity: str, shard: int, token: str) -> HeldLease | None:
        """Take the shard's lease with ``token``; None when another holder has it."""
        held = HeldLease(entity, shard, token, self.ttl, self.clock)  # validity counts from before the call
        if not self.leases.acquire(entity, shard, token, self.ttl_ms):
            return None
        with self._lock:
            self._held[(entity, shard)] = held
        return held

    def renew_due(self) -> None:
        """Renew every lease whose last renewal is a third of the TTL old (pipelined, ``RENEW_BATCH`` at a
        time); mark the refused ones lost."""
        with self._lock:
            due = [h for h in self._held.values() if self.clock() - h.renewed_at >= self.ttl / 3]
        for start in range(0, len(due), RENEW_BATCH):
            batch = due[start : start + RENEW_BATCH]
            sent = self.clock()
            try:
                renewed = self.leases.renew_many([(h.entity, h.shard, h.token) for h in batch], self.ttl_ms)
            except StateStoreUnavailableError as exc:
                # Not refused, just not confirmed: validity runs down and drainers pause before sends.
                log.warning("%d shard leases not renewed: %s", len(batch), exc)
                continue
            for held, ok in zip(batch, renewed, strict=True):
                if ok is None:  # its Redis node did not answer (a Cluster master failing over)
                    continue
                if ok:
                    held.renewed_at, held.valid_until = sent, sent + self.ttl
                else:
                    log.warning("lease of %s shard %d passed to another drainer", held.entity, held.shard)
                    held.lost.set()
                    self.forget(held)

    def forget(self, held: HeldLease) -> None:
        """Stop renewing ``held`` (its drainer stopped)."""
        with self._lock:
            if self._held.get((held.entity, held.shard)) is held:
                del self._held[(held.entity, held.shard)]

    def release(self, held: HeldLease) -> None:
        """Stop renewing and give the lease up (a no-op in Redis when it is no longer ours)."""
        self.forget(held)
        if not held.lost.is_set():
            self.leases.release(held.entity, held.shard, held.token)

    def keep_alive(self, stop: threading.Event) -> threading.Thread:
        """A daemon thread that calls ``renew_due`` every sixth of the TTL until ``stop`` is set."""

        def loop() -> None:
            while not stop.wait(self.ttl / 6):
                try:
                    self.renew_due()
                except Exception:  # a renewal thread must outlive any one failure
                    log.exception("lease renewal failed")

        thread = threading.Thread(target=loop, name="bridge-lease-keeper", daemon=True)
        thread.start()
        return thread
