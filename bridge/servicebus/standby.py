"""The backup's sender, opened before it is needed: a failover's first send finds a live link.

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
    """Open ``client``'s sender of ``entity`` on a daemon thread if ``wanted``; never raises, never waits."""
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
