"""Idle sender links, reopened off the send path before Service Bus closes them.

Service Bus force-detaches a link that carried no message for ten minutes and then closes the idle
connection (``docs/servicebus-sdk.md``, "Idle links"). The SDK notices only when the next send fails on the
dead link; it then reconnects inside its own retry, after its backoff: measured against the local Service
Bus, the first send after an idle period took 1.4 s instead of a few milliseconds, with the default
``retry`` settings. (The send still succeeds: nothing is lost or reported, it is only late.)

So a cached sender left unused for ``retry.link_refresh_after`` seconds (default 300, half of Azure's link
idle timeout) is replaced by a freshly opened one on this module's thread: the new link is opened (its
connection, CBS token and attach: about half a second) while sends keep using the old one, then swapped in
under the sender's lock, and the old one is closed. The next send after an idle period then finds a live
link. A refresh that fails only drops the cached sender (the next send opens one itself) and
is logged at DEBUG: the namespace's health is judged by real sends, not by this housekeeping.

A sender no send wanted for ``workers.idle_sender_close`` seconds (default 900) is closed instead, on the
same thread (``RoleClient.close_idle``): its link, its connection and the SDK's keep-alive thread go, so a
process that once sent to many entities comes back down to the threads of those it still sends to. The
close skips a path whose lock a call holds, so no send is ever cut off; the next send opens a new link.

Pure decision (``due``) and the thread that acts on it (``LinkRefresher``) are kept apart, so the rule is
tested as a table and the thread against a real namespace.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from bridge.settings import Settings

if TYPE_CHECKING:
    from bridge.servicebus.clients import RoleClient

logger = logging.getLogger(__name__)

MIN_INTERVAL = 0.05


def due(last_used: Mapping[str, float], now: float, refresh_after: float) -> list[str]:
    """The entities whose sender has been unused for ``refresh_after`` seconds or more, oldest first."""
    idle = [(at, entity) for entity, at in last_used.items() if now - at >= refresh_after]
    return [entity for _, entity in sorted(idle)]


class LinkRefresher:
    """A daemon thread that reopens the idle senders of the pool's live clients (see the module docstring)."""

    def __init__(
        self,
        refresh_after: float | None,
        clients: Callable[[], Iterable[RoleClient]],
        open_deadline: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        close_after: float | None = None,
    ) -> None:
        self.refresh_after = refresh_after
        self.close_after = close_after
        self._clients = clients
        self._open_deadline = open_deadline
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refreshed = 0
        """Senders replaced so far (observation for tests and status)."""
        self.closed = 0
        """Idle senders closed so far."""

    @classmethod
    def of(cls, settings: Settings, clients: Callable[[], Iterable[RoleClient]]) -> LinkRefresher | None:
        """The thread ``settings`` ask for (``retry.link_refresh_after``, ``workers.idle_sender_close``;
        None when both are off), opening links under the attempt deadline."""
        refresh_after, close_after = settings.retry.link_refresh_after, settings.workers.idle_sender_close
        if refresh_after is None and close_after is None:
            return None
        return cls(refresh_after, clients, settings.retry.attempt_deadline, close_after=close_after)

    def ensure_running(self) -> None:
        """Start the thread if it is not running (a pool starts it on first use, after any fork)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            return
        self._stop.clear()
        thread = threading.Thread(target=self._run, name="servicebus-link-refresh", daemon=True)
        self._thread = thread
        thread.start()

    def stop(self) -> None:
        """Stop the thread (it finishes the refresh in progress, if any)."""
        self._stop.set()

    def forget_thread(self) -> None:
        """In a forked child the parent's thread does not exist: the next use starts one."""
        self._thread = None

    def _run(self) -> None:
        periods = [p for p in (self.refresh_after, self.close_after) if p is not None]
        interval = max(MIN_INTERVAL, min(periods, default=60.0) / 4)
        while not self._stop.wait(interval):
            for client in list(self._clients()):
                if self._stop.is_set():
                    return
                if self.close_after is not None:
                    self.closed += len(client.close_idle(self._clock(), self.close_after))
                if self.refresh_after is None:
                    continue
                for entity in due(client.idle_since(), self._clock(), self.refresh_after):
                    self.refresh(client, entity)

    def refresh(self, client: RoleClient, entity: str) -> None:
        """Replace ``client``'s sender of ``entity`` with a newly opened one; never raises."""
        if client.retired or entity not in client.senders:
            client.last_used.pop(entity, None)
            client.sent_at.pop(entity, None)
            return
        fresh = client.new_sender(entity)
        opened, abandoned = threading.Event(), threading.Event()

        def open_fresh() -> None:
            try:
                fresh.__enter__()  # the SDK's open: connection, CBS token, attach
            except Exception as exc:  # a refresh is best effort; real sends judge the namespace
                logger.debug(
                    "refreshing the %s sender of %s failed: %s", client.role, entity, type(exc).__name__
                )
                return
            opened.set()
            if abandoned.is_set():
                _quietly_close(fresh)

        opener = threading.Thread(target=open_fresh, name="servicebus-link-open", daemon=True)
        opener.start()
        opener.join(self._open_deadline)
        with (
            client.locks.held(f"send:{entity}"),
            client.senders_lock,
        ):  # the path's sends, and the cache (its LRU eviction) as a whole
            cached = client.senders.get(entity)
            keep = opened.is_set() and not client.retired and cached is not None
            if keep:
                client.senders[entity] = fresh
                client.last_used[entity] = self._clock()
                self.refreshed += 1
            else:
                # Evicted meanwhile, retired, or not opened: the next send opens its own sender.
                client.senders.pop(entity, None)
                client.last_used.pop(entity, None)
                client.sent_at.pop(entity, None)
                abandoned.set()
        _quietly_close(cached)
        if not keep and not opener.is_alive():
            _quietly_close(fresh)


def _quietly_close(sender: object) -> None:
    close = getattr(sender, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception as exc:  # a detached link fails to close cleanly; it is gone either way
        logger.debug("closing a replaced sender failed: %s", type(exc).__name__)
