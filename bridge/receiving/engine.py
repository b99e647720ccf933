"""``ReceiveEngine``: the receiving threads of one process for one entity (or subscription).

Threads:

- one link thread per namespace (primary and secondary, whichever are configured) for an ordinary entity:
  receive a batch (PEEK_LOCK, ``batch_size``, long poll ``max_wait``), take it through ``CopyProcessor``,
  repeat. Copies that wait for another copy's handler are kept and claimed again with the next batch,
  which is then asked for with a short poll;
- for a session entity, ``concurrency`` session threads per namespace, each holding one session at a time
  (next available), handing its messages in order, releasing it after ``session_idle`` seconds without a
  message. Within this process a session is handled by one thread at a time even when both namespaces
  hold it (active replication sends each session to both);
- the handler pool (``concurrency`` threads) for ordinary entities;
- the lock watch (``bridge.receiving.renewal``), which also pauses the links and the processor (nothing
  received, claimed or handed) while this process cannot renew the in-flight marks of running handlers.

Stopping (``stop()``, SIGTERM in ``bridge receive``): no new receive call starts; the batch in hand is
finished — handlers run to their end, done marks are written, copies settled — waiting copies are
abandoned, then the links close. A namespace that fails is retried with capped exponential backoff (full
jitter; the SDK's ``retry_backoff_factor`` doubling up to ``retry_backoff_max``, at least 0.2 s and 2 s)
while the other keeps working, so a namespace that comes back is read again within seconds.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from bridge.core.backoff import BackoffPolicy
from bridge.core.receiving import ReceiverCounts
from bridge.errors import (
    BackpressureError,
    ConfigurationError,
    NamespaceEntityNotFoundError,
    NamespaceError,
    StateStoreUnavailableError,
)
from bridge.journal.emit import ReceiverJournal, namespace_names
from bridge.journal.store import JournalStore
from bridge.observability import receiver_spans, tracing
from bridge.receiving.counters import ReceiverCounterStore
from bridge.receiving.keys import ReceiverKeys
from bridge.receiving.processing import Copy, CopyProcessor, Handler
from bridge.receiving.renewal import LockWatch
from bridge.receiving.window import DedupWindow
from bridge.redis.connection import sync_client
from bridge.servicebus.receiving import Delivery, EntityLink, LockRenewer
from bridge.settings import NamespaceSettings, Settings

logger = logging.getLogger(__name__)

PARKED_POLL = 0.05
"""Receive wait (seconds) while copies wait for another copy's handler: they are claimed again soon."""
BACKPRESSURE_PAUSE = 1.0
"""Seconds a link stops receiving when the window is full, before its waiting copies are claimed again."""
ENTITY_MISSING_RETRY = 60.0
"""Seconds between two looks for an entity that does not exist on a namespace."""


def process_owner() -> str:
    """A name for this process in in-flight marks: host, pid and a random part (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class ReceiveEngine:
    """Receives one entity (or one subscription) from both namespaces; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        entity: str,
        handler: Handler,
        *,
        subscription: str | None = None,
        sessions: bool | None = None,
        backlog_queues: Sequence[str] = (),
        stop_when_idle: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.options = settings.receiver
        self.entity = entity
        self.subscription = subscription
        self.sessions = settings.entity(entity).requires_session if sessions is None else sessions
        self.backlog_queues = tuple(backlog_queues)
        self.stop_when_idle = stop_when_idle
        self.clock = clock
        self.namespaces = self._namespaces(settings)
        self.keys = ReceiverKeys(entity, subscription)
        self.owner = process_owner()
        self.redis = sync_client(settings.redis_url.get_secret_value())
        self.window = DedupWindow(
            self.redis,
            self.keys,
            owner=self.owner,
            window=self.options.window,
            max_remembered=self.options.max_remembered,
            inflight_ttl=self.options.inflight_ttl,
            journal_max=settings.journal.max_length if settings.journal.enabled else 0,
        )
        self.counters = ReceiverCounterStore(self.redis, self.keys)
        self.renewer = LockRenewer(self.options.max_lock_renewal)
        self.watch = LockWatch(
            self.renewer, self.window, self.options.inflight_ttl, clock=clock, counters=self.counters
        )
        self.pool = ThreadPoolExecutor(self.options.concurrency, thread_name_prefix="receiver-handler")
        self._stopping = threading.Event()
        self._sessions_held: dict[str, tuple[threading.Lock, int]] = {}
        self._sessions_lock = threading.Lock()
        self.processor = CopyProcessor(
            window=self.window,
            counters=self.counters,
            handler=handler,
            pool=self.pool,
            max_handlers=self.options.concurrency,
            watch=self.watch,
            busy_wait=self.options.busy_wait,
            max_lock_renewal=self.options.max_lock_renewal,
            clock=clock,
            wait=self._stopping.wait,
            stopping=self._stopping.is_set,
            journal=ReceiverJournal(
                JournalStore(self.redis, settings.journal),
                entity,
                namespace_names(
                    settings.primary.namespace_name if settings.primary else None,
                    settings.secondary.namespace_name if settings.secondary else None,
                ),
            ),
        )
        self._threads: list[threading.Thread] = []
        retry = settings.retry
        self.reconnect = BackoffPolicy(
            retry_backoff_factor=max(0.2, retry.retry_backoff_factor),
            retry_backoff_max=max(2.0, retry.retry_backoff_max),
        )

    def _namespaces(self, settings: Settings) -> list[tuple[str, NamespaceSettings]]:
        if self.backlog_queues:
            if settings.secondary is None:
                raise ConfigurationError("reading backlog queues needs the secondary namespace")
            return [("secondary", settings.secondary)]
        found = [
            (role, ns) for role, ns in (("primary", settings.primary), ("secondary", settings.secondary))
        ]
        configured = [(role, ns) for role, ns in found if ns is not None]
        if not configured:
            raise ConfigurationError("receiving needs the primary and/or secondary namespace")
        if settings.entity(self.entity).replication == "none":
            configured = configured[:1]
        return configured

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def run(self) -> None:
        """Receive until ``stop()`` (or, with ``stop_when_idle``, until every link found nothing).

        Raises ``ConfigurationError`` first when Redis would not keep the window compact
        (``DedupWindow.check_compact``); a Redis that cannot take the check now (unreachable, full) is
        checked at the next start."""
        self._check_compact()
        self.watch.start()
        for role, namespace in self.namespaces:
            if self.backlog_queues:
                for queue in self.backlog_queues:
                    self._start(f"backlog-{queue}", self._run_link, self._link(role, namespace, queue, True))
            elif self.sessions:
                for i in range(self.options.concurrency):
                    self._start(f"{role}-session-{i}", self._run_sessions, self._link(role, namespace))
            else:
                self._start(f"{role}-receive", self._run_link, self._link(role, namespace))
        try:
            for thread in self._threads:
                while thread.is_alive():
                    thread.join(0.2)  # short joins keep the main thread responsive to signals
        finally:
            self._stopping.set()
            self.close()

    def _check_compact(self) -> None:
        try:
            self.window.check_compact()
        except (StateStoreUnavailableError, BackpressureError) as error:
            logger.warning(
                "could not check that Redis keeps the window compact (Redis unavailable or full): %s", error
            )
        except ConfigurationError:
            self.close()
            raise

    def stop(self) -> None:
        """Finish the batches in hand, then return from ``run`` (thread-safe, signal-safe)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` was called."""
        return self._stopping.is_set()

    def close(self) -> None:
        """Release everything ``run`` used (called by ``run`` itself on its way out)."""
        self.watch.stop()
        self.pool.shutdown(wait=True)
        self.renewer.close()
        self.redis.close()

    def counts(self) -> ReceiverCounts:
        """The entity's receiver counters (every process's)."""
        return self.counters.read()

    def _start(self, name: str, target: Callable[[EntityLink], None], link: EntityLink) -> None:
        thread = threading.Thread(target=self._guarded, args=(target, link), name=f"receiver-{name}")
        thread.daemon = True
        self._threads.append(thread)
        thread.start()

    def _guarded(self, target: Callable[[EntityLink], None], link: EntityLink) -> None:
        try:
            target(link)
        except Exception:
            logger.exception("receiver thread for %s on %s failed", link.path, link.role)
        finally:
            link.close()

    def _link(self, role: str, namespace: NamespaceSettings, queue: str | None = None, backlog: bool = False
              ) -> EntityLink:  # fmt: skip
        return EntityLink(
            role,
            namespace,
            self.settings.retry,
            entity=queue or self.entity,
            subscription=None if backlog else self.subscription,
            prefetch=self.options.prefetch,
            session_prefetch=self.options.batch_size,
            sessions=self.sessions and not backlog,
            backlog=backlog,
            renewer=self.renewer,
            sdk_timeout=max(0.5, self.settings.retry.attempt_deadline / 2),
        )

    def _learn_max_delivery_count(self, link: EntityLink) -> None:
        if link.role in self.processor.max_delivery_counts:
            return
        configured = self.options.max_delivery_count
        count = configured if configured is not None else link.max_delivery_count()
        if count is not None:
            self.processor.max_delivery_counts[link.role] = count

    def _failed(self, link: EntityLink, attempt: int, error: Exception) -> None:
        delay = self.reconnect.delay(attempt, random.random)
        if isinstance(error, NamespaceEntityNotFoundError):
            # e.g. a paired entity that exists only on the primary: look again now and then, quietly.
            delay = max(delay, ENTITY_MISSING_RETRY)
        log = logger.warning if attempt in (0, 5) or attempt % 50 == 0 else logger.debug
        log("receiving %s from %s failed (retry in %.1fs): %s", link.path, link.role, delay, error)
        self._stopping.wait(delay)

    # ---- ordinary entities ---------------------------------------------------------------------------------
    def _run_link(self, link: EntityLink) -> None:
        options = self.options
        if not link.backlog:
            self._learn_max_delivery_count(link)
        parked: list[Copy] = []
        held: list[Copy] = []
        failures = 0
        while not self._stopping.is_set():
            if self.watch.paused:
                # This process cannot renew its in-flight marks: it receives and claims nothing until it can
                # (the copies it holds wait, their locks renewed).
                self.watch.wait_open(BACKPRESSURE_PAUSE)
                continue
            if self.processor.backpressure and parked:
                self._stopping.wait(BACKPRESSURE_PAUSE)
                new: list[Delivery] = []
            else:
                try:
                    new = self._receive(link, PARKED_POLL if parked else options.max_wait)
                except NamespaceError as error:
                    # Waiting copies went with the failed connection: Service Bus delivers them again.
                    self.watch.untrack([copy.delivery for copy in parked + held])
                    parked, held = [], []
                    self._failed(link, failures, error)
                    failures += 1
                    continue
                failures = 0
            if link.backlog:
                new = self._only_this_entity(link, new, held)
            if not new and not parked and self.stop_when_idle:
                break
            parked = self.processor.process_batch(link, new, parked)
        for copy in parked + held:
            self._give_back(copy)

    def _only_this_entity(self, link: EntityLink, new: list[Delivery], held: list[Copy]) -> list[Delivery]:
        """Backlog drain: hand only this entity's restorable messages. The others stay locked (``held``)
        until the drain ends, so later receives reach the messages behind them; then they are given back
        untouched (the syphon, or another drain, takes them)."""
        mine: list[Delivery] = []
        for delivery in new:
            if delivery.problem is None and delivery.entity == self.entity:
                mine.append(delivery)
            else:
                self.watch.track(link, [delivery])
                held.append(Copy(link, delivery, self.clock()))
        return mine

    def _receive(self, link: EntityLink, wait: float) -> list[Delivery]:
        """A batch from ``link``, in a ``receive`` span and counted when tracing or metrics are on."""
        count = self.options.batch_size
        if not receiver_spans.observing():
            return link.receive(count, wait)
        return receiver_spans.receive(link, lambda: link.receive(count, wait))

    def _give_back(self, copy: Copy) -> None:
        link, delivery = copy.link, copy.delivery
        try:
            if tracing.enabled():
                receiver_spans.settle(link, delivery, "abandon", lambda: link.abandon(delivery))
            else:
                link.abandon(delivery)
        except NamespaceError as error:
            logger.info(
                "giving back %s on %s failed (its lock expires): %s", copy.message_id, copy.link.role, error
            )
        self.watch.untrack([copy.delivery])

    # ---- session entities ----------------------------------------------------------------------------------
    def _run_sessions(self, link: EntityLink) -> None:
        options = self.options
        self._learn_max_delivery_count(link)
        failures = 0
        while not self._stopping.is_set():
            if self.watch.paused:
                self.watch.wait_open(BACKPRESSURE_PAUSE)  # no new session while marks cannot be renewed
                continue
            try:
                session = link.accept_session(options.max_wait)
            except NamespaceError as error:
                self._failed(link, failures, error)
                failures += 1
                continue
            failures = 0
            if session is None:
                if self.stop_when_idle:
                    break
                continue
            try:
                with self._session_turn(session):
                    self._drain_session(link)
            except NamespaceError as error:
                logger.info("session %s on %s ended: %s", session, link.role, error)
            finally:
                link.release_session()

    def _drain_session(self, link: EntityLink) -> None:
        while not self._stopping.is_set():
            deliveries = self._receive(link, self.options.session_idle)
            if not deliveries:
                return
            if not self.processor.process_session_batch(link, deliveries):
                return  # releasing the session gives the rest back, in order, after the one given up

    @contextmanager
    def _session_turn(self, session: str) -> Iterator[None]:
        """The in-process lock of ``session``: one thread at a time hands its messages."""
        with self._sessions_lock:
            lock, users = self._sessions_held.get(session, (threading.Lock(), 0))
            self._sessions_held[session] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._sessions_lock:
                lock, users = self._sessions_held[session]
                if users <= 1:
                    del self._sessions_held[session]  # forget sessions nobody holds
                else:
                    self._sessions_held[session] = (lock, users - 1)
