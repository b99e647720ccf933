"""``NamespacePool``: the per-process Service Bus clients of the two namespace roles.

Connection strings (``Settings.primary`` / ``Settings.secondary``, secrets as ``SecretStr``)::

    Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<rule>;SharedAccessKey=<key>
    Endpoint=sb://127.0.0.1:<port>;SharedAccessKeyName=...;SharedAccessKey=...;UseDevelopmentEmulator=true

Options (``Settings.retry``): ``retry_total``, ``retry_backoff_factor``, ``retry_backoff_max`` go to the
SDK unchanged (its own bounded retries, see ``clients``); ``attempt_deadline`` bounds every SDK call from
outside (``deadline.AttemptRunner``); the SDK also gets an operation timeout of half the deadline
(``timeout=`` per send/schedule/cancel, ``try_timeout`` and ``auth_timeout`` per link, at least 0.5 s) so
a slow broker answers with its own timeout before the hard deadline. ``coupling_grace`` (5 s),
``max_stuck_threads`` (8) and ``probe_policy`` are keyword options of the pool.

Sends are watched by the connect probe (``connect_probe``, ``bridge.core.reachability``): a send still
running after ``probe_policy.after`` (50 ms) has the namespace's address probed with a TCP connect, and a
refusal ends it at once as an outage instead of after the SDK's own retries; a send that starts while
the address refused a moment ago fails without being tried.

One ``ServiceBusClient`` per role ("primary", "secondary"), created lazily; one sender per (role, entity
path) — ``get_queue_sender`` for queues and topics alike, the AMQP link target is just the path — and one
PEEK_LOCK receiver per (role, queue), used through ``queues`` (``bridge.servicebus.queue_receivers``). A fault
of the outage class (lost connection, refused connection, deadline overrun) retires the role's whole client:
calls in flight finish on it, the next call opens a fresh one. An overrun closes the stuck client at once on a
background thread. Senders idle for ``workers.idle_sender_close`` are closed, and idle ones younger than that
refreshed (``refresh``).

Close/fault coupling (after the .NET paired client; the decision is ``bridge.core.coupling``): when one
role's client faults or is closed and its partner is not closed within ``coupling_grace`` (5 s), the
partner is closed too, by a timer thread; both reopen cleanly on next use. Links the next send will need
can be made before it, in the background: ``warm`` (the passive backup's) and ``reopen`` (after an outage,
``bridge.servicebus.standby``).

Per process: a pool must not cross a fork (its sockets and threads belong to the parent). Celery workers
create one pool per worker process after fork (``worker_process_init``). As a safety net a pool used in a
forked child forgets the parent's clients without closing them and starts afresh.

Thread safety: calls may come from several threads; each sender/receiver is used by one call at a time
(a lock per handler, waited for at most the attempt deadline).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TypeVar

from azure.servicebus import (
    ServiceBusMessageBatch,
    ServiceBusSender,
)

from bridge.core.coupling import (
    COUPLING_GRACE,
    CloseCause,
    CouplingState,
    due_closes,
    next_due_at,
    on_close,
    on_open,
)
from bridge.core.error_classes import ErrorClass, classify
from bridge.core.reachability import ProbePolicy
from bridge.core.roles import Role
from bridge.errors import (
    AttemptDeadlineExceeded,
    EndpointRefusedError,
    NamespaceConfigurationError,
    NamespaceError,
    RefusedMidAttemptError,
    TransientNamespaceError,
)
from bridge.process_threads import ProcessThreads
from bridge.servicebus.batches import make_batch
from bridge.servicebus.clients import RoleClient
from bridge.servicebus.connect_probe import ConnectProbe
from bridge.servicebus.deadline import DEFAULT_MAX_STUCK, AttemptRunner, Watch
from bridge.servicebus.messages import OutgoingMessage, scheduled_time_of
from bridge.servicebus.queue_receivers import QueueReceivers
from bridge.servicebus.refresh import LinkRefresher
from bridge.servicebus.sending import SendResult, SharedBatches, send_in_batches
from bridge.servicebus.standby import REOPEN_THREADS, open_standby, reopen_wanted
from bridge.servicebus.translate import translate
from bridge.settings import NamespaceSettings, Settings

T = TypeVar("T")
logger = logging.getLogger(__name__)


class _Channel:
    """The ``BatchChannel`` of one sender: every call under the deadline, errors translated."""

    def __init__(
        self, pool: NamespacePool, client: RoleClient, sender: ServiceBusSender, entity: str
    ) -> None:
        self.pool, self.client, self.sender, self.entity = pool, client, sender, entity

    def new_batch(self) -> ServiceBusMessageBatch:
        """An empty batch sized for the link. The first one of a sender comes from the SDK under the
        deadline (``create_message_batch`` opens the link to learn its size); later ones are made here
        with that size (``bridge.servicebus.batches.make_batch``, no I/O, each message encoded once), so
        that a batched send hands one call to an attempt thread, not two."""
        return make_batch(self.pool._limit_of(self.client, self.sender, self.entity))

    def send_batch(self, batch: ServiceBusMessageBatch) -> None:
        send = partial(self.sender.send_messages, batch, timeout=self.pool.sdk_timeout)
        self.pool._call(self.client, f"send to {self.entity}", send, probe=True)


class NamespacePool:
    """The Service Bus clients of one process; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        *,
        coupling_grace: float = COUPLING_GRACE,
        max_stuck_threads: int = DEFAULT_MAX_STUCK,
        clock: Callable[[], float] = time.monotonic,
        probe_policy: ProbePolicy | None = None,
    ) -> None:
        self._namespaces: dict[Role, NamespaceSettings | None] = {
            "primary": settings.primary,
            "secondary": settings.secondary,
        }
        self._retry = settings.retry
        self.attempt_deadline = settings.retry.attempt_deadline
        self.sdk_timeout = max(0.5, settings.retry.attempt_deadline / 2)
        self.coupling_grace = coupling_grace
        self._max_stuck = max_stuck_threads
        self._max_senders = settings.workers.max_senders
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: dict[Role, RoleClient] = {}
        self._batch_limits: weakref.WeakKeyDictionary[ServiceBusSender, int] = weakref.WeakKeyDictionary()
        """Each open sender's batch size limit, learnt from its first batch (``_Channel.new_batch``)."""
        self._limits_lock = threading.Lock()
        self._coupling = CouplingState()
        self._generation = 0
        self._timer: threading.Timer | None = None
        self._pid = os.getpid()
        self._runner = AttemptRunner(max_stuck=max_stuck_threads)
        self.connect_probe = ConnectProbe(self._namespaces, probe_policy)
        self._reopen_threads = ProcessThreads(REOPEN_THREADS, "servicebus-reopen")
        self._closed = False  # set by ``close``: no reopen makes a client after it
        self._refresher = LinkRefresher.of(settings, self._live_clients)
        self.queues = QueueReceivers(self._using, self._call, self.sdk_timeout)
        """The receive side: receive, settle, defer, peek and renew locks on queues (the syphon's)."""

    # ---- public operations -----------------------------------------------------------------------------
    def send(
        self,
        role: Role,
        entity: str,
        messages: Sequence[OutgoingMessage],
        *,
        keys: Sequence[str | None] | None = None,
        shared: SharedBatches | None = None,
    ) -> SendResult:
        """Send ``messages`` to ``entity`` in order, in as few batches as fit; never raises for failures.

        ``SendResult.accepted`` lists the indexes the namespace accepted, ``failed`` maps the others to
        their ``NamespaceError`` (``bridge.servicebus.sending`` describes which fail with what, and what
        ``keys``, the messages' order keys, change). ``shared``: the batches are packed once for the
        other namespace's send of the same messages, at the same time (``SharedBatches``).
        """
        if not messages:
            return SendResult()
        if self._refresher is not None:
            self._refresher.ensure_running()
        try:
            with self._using(role, f"send:{entity}") as client:
                channel = _Channel(self, client, client.sender(entity), entity)
                result = send_in_batches(channel, messages, namespace=role, keys=keys, shared=shared)
        except NamespaceError as error:
            return SendResult(failed=dict.fromkeys(range(len(messages)), error))
        if result.accepted:
            self.connect_probe.calibrate(role)
        return result

    def warm(self, role: Role, entity: str) -> None:
        """Have ``role``'s sender of ``entity`` opened in the background unless it is (``standby``): the
        backup's link, so that a failover's first send does not open a connection. Never raises or waits."""
        if self._namespaces.get(role) is None:
            return
        with self._lock:
            self._forget_parent_clients()
            try:
                client = self._clients.get(role) or self._open(role)
            except NamespaceError:
                return
        open_standby(client, entity)

    def reopen(self, role: Role, entity: str) -> None:
        """Have ``role``'s sender of ``entity`` opened now in the background, holding the path's lock, unless
        this client has it or tried it (``bridge.servicebus.standby``): a shard's next batch there finds
        its link made. Never raises or waits; does nothing once the pool is closed."""
        if self._namespaces.get(role) is not None:
            self._reopen_threads.submit(partial(self._reopen_now, role, entity))

    def _reopen_now(self, role: Role, entity: str) -> None:
        """(On a reopen thread.) Open the sender under the deadline, as a send would."""
        try:
            with self._lock:
                if self._closed:  # closed since the reopen was asked for: a client now would outlive it
                    return
                client = self._take(role)
        except NamespaceError:
            return
        try:
            if not reopen_wanted(client, entity):
                return
            if not client.locks.acquire(f"send:{entity}", 0):
                return  # a send has the path: it opens the link itself
            started = time.monotonic()
            try:  # the SDK's first batch opens the link, and its limit lets the next batch be packed ahead
                self._limit_of(client, client.sender(entity), entity)
            finally:
                client.locks.release(f"send:{entity}")
            logger.info("reopened the %s sender of %s in %.2fs", role, entity, time.monotonic() - started)
        except NamespaceError as exc:  # an outage retired the client in ``_call``: the sends will judge it
            logger.info("reopening the %s sender of %s failed: %s", role, entity, type(exc).__name__)
        finally:
            self._release(client)

    def forget(self, entity: str) -> None:
        """Close ``entity``'s senders now where no call holds them (it retired); the rest go when idle."""
        for client in self._live_clients():
            client.forget(entity)

    def schedule_and_cancel(self, role: Role, entity: str, message: OutgoingMessage) -> None:
        """Schedule ``message`` at its ScheduledEnqueueTimeUtc and cancel it at once (ping mode "schedule").

        Raises ``NamespaceError``; ``ValueError`` when the message has no scheduled time.
        """
        when = scheduled_time_of(message)
        if when is None:
            raise ValueError("schedule_and_cancel needs a message with scheduled_enqueue_time_utc")
        timeout = self.sdk_timeout
        with self._using(role, f"send:{entity}") as client:
            sender = client.sender(entity)
            numbers = self._call(
                client,
                f"schedule on {entity}",
                lambda: sender.schedule_messages(message, when, timeout=timeout),
            )
            self._call(
                client,
                f"cancel on {entity}",
                lambda: sender.cancel_scheduled_messages(numbers, timeout=timeout),
            )

    def close(self) -> None:
        """Close both roles' clients (on background threads) and stop the coupling timer."""
        with self._lock:
            self._closed = True
            clients = list(self._clients.values())
            self._clients.clear()
            self._coupling = CouplingState()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if self._refresher is not None:
            self._refresher.stop()
        self._reopen_threads.shutdown()
        for client in clients:
            client.retired = True
            self._discard(client, force=client.users == 0)
        self._runner.shutdown()

    # ---- observation (status, tests) -------------------------------------------------------------------
    def generation(self, role: Role) -> int | None:
        """The open client generation of ``role`` (increases with every reopen), None when closed."""
        with self._lock:
            client = self._clients.get(role)
            return None if client is None else client.generation

    def sender_paths(self, role: Role) -> list[str]:
        """The entity paths with a cached sender in ``role``'s open client (standby links among them)."""
        with self._lock:
            client = self._clients.get(role)
        if client is None:
            return []
        with client.senders_lock:
            return list(client.senders)

    def batch_limit(self, role: Role, entity: str) -> int | None:
        """The batch size limit of ``role``'s link to ``entity``, learnt from its first batch (None: none)."""
        with self._lock:
            client = self._clients.get(role)
        sender = None if client is None else client.senders.get(entity)  # a dict read: atomic
        with self._limits_lock:
            return None if sender is None else self._batch_limits.get(sender)

    @property
    def refreshed_links(self) -> int:
        """Idle senders reopened in the background so far (``refresh``)."""
        return 0 if self._refresher is None else self._refresher.refreshed

    def _live_clients(self) -> list[RoleClient]:
        with self._lock:
            return [c for c in self._clients.values() if not c.retired]

    @property
    def stuck_threads(self) -> int:
        """Threads abandoned by deadline overruns (or closing stuck clients) that have not returned."""
        return self._runner.stuck

    # ---- clients -----------------------------------------------------------------------------------------
    @contextmanager
    def _using(self, role: Role, handler_key: str) -> Iterator[RoleClient]:
        with self._lock:
            client = self._take(role)
        try:
            if not client.locks.acquire(handler_key, self.attempt_deadline):
                # Another thread's call on this handler (e.g. a long receive): says nothing of the namespace.
                raise TransientNamespaceError(
                    f"{role} {handler_key}: still busy with another call after {self.attempt_deadline:g}s",
                    namespace=role,
                )
            try:
                yield client
            finally:
                client.locks.release(handler_key)
        finally:
            self._release(client)

    def _take(self, role: Role) -> RoleClient:
        """(Under ``_lock``.) ``role``'s client, opened if there is none, counted as in use."""
        self._forget_parent_clients()
        client = self._clients.get(role) or self._open(role)
        client.users += 1
        return client

    def _open(self, role: Role) -> RoleClient:
        namespace = self._namespaces[role]
        if namespace is None:
            raise NamespaceConfigurationError(f"no {role} namespace is configured", namespace=role)
        client = RoleClient.open(
            role,
            self._generation + 1,
            namespace,
            self._retry,
            self.sdk_timeout,
            max_senders=self._max_senders,
        )
        self._generation = client.generation
        self._clients[role] = client
        self._coupling = on_open(self._coupling, role, client.generation)
        logger.debug("opened %s client generation %d", role, client.generation)
        return client

    def _limit_of(self, client: RoleClient, sender: ServiceBusSender, entity: str) -> int:
        """The batch size limit of ``sender``'s link, learnt once from the SDK's first batch (which opens
        the link, under the deadline)."""
        with self._limits_lock:
            limit = self._batch_limits.get(sender)
        if limit is None:
            first = self._call(client, f"batch for {entity}", sender.create_message_batch, probe=True)
            limit = first.max_size_in_bytes
            with self._limits_lock:
                self._batch_limits[sender] = limit
        return limit

    def _release(self, client: RoleClient) -> None:
        with self._lock:
            client.users -= 1
            close_now = client.retired and client.users == 0 and not client.closing
            if close_now:
                client.closing = True
        if close_now:
            self._runner.discard(client.close, f"{client.role} client {client.generation}")

    def _call(
        self, client: RoleClient, what: str, call: Callable[[], T], extra: float = 0.0, probe: bool = False
    ) -> T:
        """``call()`` under the deadline (+ ``extra``), errors translated; an outage retires the client.

        ``probe`` (sends): the connect probe may end the call early, or refuse it before it starts, when
        the namespace's address refuses TCP connections (``bridge.servicebus.connect_probe``).
        """
        role = client.role
        watch = self._watch(role, what) if probe else None
        try:
            if probe and (refusal := self.connect_probe.refusing(role, what)) is not None:
                raise refusal
            return self._runner.run(
                call, self.attempt_deadline + extra, namespace=role, what=what, watch=watch
            )
        except (AttemptDeadlineExceeded, RefusedMidAttemptError) as exc:
            error: NamespaceError = exc
            self._retire(client, CloseCause.FAULT, force=True)
        except EndpointRefusedError as exc:
            error = exc
            self._retire(client, CloseCause.FAULT, force=False)
        except Exception as exc:  # every SDK failure; translated below, outside this block
            error = translate(exc, role, what)
            if classify(error).error_class is ErrorClass.OUTAGE:
                self._retire(client, CloseCause.FAULT, force=False)
            if error.address_refused:  # the SDK's own "connection refused" tells what a probe would
                self.connect_probe.refused_by_sdk(role)
        raise error from None

    def _watch(self, role: Role, what: str) -> Watch | None:
        check = self.connect_probe.watch(role, what)
        policy = self.connect_probe.policy
        return None if check is None else Watch(check, policy.after, policy.every)

    # ---- retiring and coupling ---------------------------------------------------------------------------
    def _retire(self, client: RoleClient, cause: CloseCause, force: bool) -> None:
        """Take ``client`` out of use; close it now (``force``) or when its last call returns."""
        with self._lock:
            if self._clients.get(client.role) is client:
                del self._clients[client.role]
                self._coupling = on_close(
                    self._coupling,
                    client.role,
                    client.generation,
                    self._clock(),
                    cause=cause,
                    grace=self.coupling_grace,
                )
                self._schedule_coupling()
                logger.info("retired %s client generation %d (%s)", client.role, client.generation, cause)
            client.retired = True
        self._discard(client, force=force or client.users == 0)

    def _discard(self, client: RoleClient, force: bool) -> None:
        with self._lock:
            if not force or client.closing:
                return
            client.closing = True
        self._runner.discard(client.close, f"{client.role} client {client.generation}")

    def _schedule_coupling(self) -> None:
        """(Under the lock.) Arm the timer for the earliest pending partner close."""
        due_at = next_due_at(self._coupling)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if due_at is None:
            return
        timer = threading.Timer(max(0.0, due_at - self._clock()), self._apply_coupling)
        timer.daemon = True
        timer.name = "servicebus-coupling"
        self._timer = timer
        timer.start()

    def _apply_coupling(self) -> None:
        with self._lock:
            self._coupling, due = due_closes(self._coupling, self._clock())
            targets = [
                (close, self._clients[close.role])
                for close in due
                if close.role in self._clients and self._clients[close.role].generation == close.generation
            ]
        for close, client in targets:
            logger.warning("closing the %s client: %s", close.role, close.reason)
            self._retire(client, CloseCause.COUPLING, force=False)
        with self._lock:
            self._schedule_coupling()

    def _forget_parent_clients(self) -> None:
        """(Under the lock.) In a forked child, drop the parent's clients unclosed and start afresh."""
        if os.getpid() == self._pid:
            return
        logger.warning("namespace pool used across fork; dropping %d parent clients", len(self._clients))
        self._pid = os.getpid()
        self._clients = {}
        self._coupling = CouplingState()
        self._timer = None
        self._runner = AttemptRunner(max_stuck=self._max_stuck)
        self.connect_probe = ConnectProbe(self._namespaces, self.connect_probe.policy)
        if self._refresher is not None:
            self._refresher.forget_thread()


__all__ = ["NamespacePool", "SendResult"]
