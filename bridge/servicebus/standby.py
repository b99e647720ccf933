"""Senders opened before they are needed: a failover's first send, or the first batch after an outage,
finds a live link.

In passive mode the backup namespace carries no traffic, so a worker process has no connection to it; the
first message of a failover paid for a new connection, its CBS token and the link's attach (about half a
second against the local Service Bus on a loaded machine, ``docs/servicebus-sdk.md``) on top of noticing
the outage. ``open_standby`` opens the backup's sender for an entity on a daemon thread, off the send
path, and hands it to the client's sender cache (``RoleClient.adopt``) unless a send opened one first;
the link refresher then keeps it alive like any idle sender (``bridge.servicebus.refresh``).

Bounds: per client, one standby open at a time, and one try per entity every ``RETRY_AFTER`` seconds (a
backup that is down is not hammered; it is judged by the probes and by real sends, never by this). An
open that hangs (a blackholed backup accepts TCP and never answers) holds its one thread until the
client is closed; no further standby open starts on that client meanwhile. A failed open is logged at
DEBUG only.

Reopening: after an outage both roles' clients were retired (a fault retires a client, and the close
coupling closes its partner), so every link is made again on the first send there. An active shard whose first
batch after the restore goes to one namespace only (the other had it) made the other's link only when its next
batch needed it, and then waited for the connection, its token and the attach (1.4 s in the outage benchmark,
while every other shard reconnected too, ``docs/outages.md``). So when a namespace is seen back, the shard
pool asks ``NamespacePool.reopen`` for the links of the entities whose shards it wakes
(``bridge.core.replication.linked_roles``; half of ``workers.max_senders`` at most), and the pool opens
them on a few threads (``REOPEN_THREADS``, ``bridge.process_threads``) *holding the path's lock* as a send
does: a batch that needs the link meanwhile waits for this open instead of starting a second one. Each
client tries each entity once (``reopen_wanted``; a failure that is an outage retires the client as a
failed send would; its successor may try again); a path whose lock a send holds is left to that send. A
closed pool opens nothing more: a reopen still queued is dropped, and one that starts after the close
finds the pool closed and makes no client.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridge.servicebus.clients import RoleClient

logger = logging.getLogger(__name__)

RETRY_AFTER = 30.0
"""Seconds before a standby open of the same entity on the same client is tried again."""


def wanted(client: RoleClient, entity: str, now: float) -> bool:
    """Whether a standby open of ``entity`` should start now (claims the client's one open if so)."""
    with client.senders_lock:
        if client.retired or client.standby_opening or entity in client.senders:
            return False
        tried = client.standby_tried.get(entity)
        if tried is not None and now - tried < RETRY_AFTER:
            return False
        client.standby_opening = True
        client.standby_tried[entity] = now
        return True


def open_standby(client: RoleClient, entity: str) -> None:
    """Open ``client``'s sender of ``entity`` on a daemon thread if ``wanted``; never raises, never waits.
    An open one counts as used: the standby link stays while its entity has traffic (``close_idle``)."""
    client.touch(entity)
    if not wanted(client, entity, time.monotonic()):
        return

    def run() -> None:
        sender = client.new_sender(entity)
        try:
            sender.__enter__()  # the SDK's open: connection, CBS token, attach
            adopted = client.adopt(entity, sender)
        except Exception as exc:  # best effort: real sends judge the namespace
            logger.debug(
                "standby open of the %s sender of %s failed: %s", client.role, entity, type(exc).__name__
            )
            adopted = False
        finally:
            with client.senders_lock:
                client.standby_opening = False
        if not adopted:
            try:
                sender.close()
            except Exception as exc:  # never opened or already broken
                logger.debug("closing an unused standby sender failed: %s", type(exc).__name__)

    threading.Thread(target=run, name="servicebus-standby", daemon=True).start()


REOPEN_THREADS = 4
"""Links one namespace pool opens at once after an outage (``NamespacePool.reopen``)."""


def reopen_wanted(client: RoleClient, entity: str) -> bool:
    """Whether a reopen of ``entity`` should start on ``client`` (claims it if so: once per client)."""
    with client.senders_lock:
        if client.retired or entity in client.senders or entity in client.reopened:
            return False
        client.reopened.add(entity)
        return True
