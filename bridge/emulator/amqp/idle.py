"""Idle links and connections, closed the way Service Bus closes them.

Service Bus force-detaches an entity link that carried no message for ten minutes, with
``amqp:link:detach-forced`` ("... Details: AmqpMessagePublisher.IdleTimerExpired: Idle timeout:
00:10:00." for a sender, ``AmqpMessageConsumer`` for a receiver), and closes a connection that has been
inactive — no entity link and no traffic — for five minutes with ``amqp:connection:forced`` ("The
connection was inactive for more than the allowed 300000 milliseconds and is closed by container
'LinkTracker'."); see ``docs/references.md``. Clients that do not recover from either are a well-known
failure, so the local namespace does the same, with both timeouts settable (``IdleTimeouts``) so tests see
it in seconds. The fault control's ``detach`` forces the same link detach at once.

Activity: a link is active when a message crosses it (a transfer either way, or a disposition of ours);
flow frames do not count, so a receiver waiting on an empty entity idles out as on Azure. The connection's
clock restarts on every frame the client sends other than a heartbeat, and when a link is detached.
Request-node links (``$cbs``, ``$management``) never idle out on their own; they go with the connection.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proton import Condition, Endpoint, Link, symbol

from bridge.emulator.errors import DetachForcedError

if TYPE_CHECKING:
    from bridge.emulator.amqp.broker import Consumer
    from bridge.emulator.amqp.connection import AmqpConnection

CONNECTION_FORCED = "amqp:connection:forced"
AZURE_LINK_IDLE = 600.0
AZURE_CONNECTION_IDLE = 300.0


@dataclass(frozen=True, slots=True)
class IdleTimeouts:
    """Seconds of inactivity after which a link is detached and a connection closed (Azure's by default)."""

    link: float = AZURE_LINK_IDLE
    connection: float = AZURE_CONNECTION_IDLE

    def sweep_interval(self) -> float:
        """How often to look: a tenth of the shorter timeout, between 50 ms and 5 s."""
        return min(5.0, max(0.05, min(self.link, self.connection) / 10))


def now() -> float:
    """The idle clock (monotonic: wall-clock jumps must not idle out a link)."""
    return time.monotonic()


def touch(link: Link) -> None:
    """Record message traffic on a client's sender link (our receiving end)."""
    link.sb_active = now()


def idle_error(link: Link, timeout: float, *, consumer: bool) -> DetachForcedError:
    """The detach Service Bus sends for an idle link."""
    role = "AmqpMessageConsumer" if consumer else "AmqpMessagePublisher"
    code = "consumer" if consumer else "publisher"
    return DetachForcedError(
        f"The link '{link.name}' is force detached. Code: {code}(link). "
        f"Details: {role}.IdleTimerExpired: Idle timeout: {_hms(timeout)}."
    )


def forced_detach_error(link: Link) -> DetachForcedError:
    """The detach of the fault control's ``detach`` (Service Bus's wording for an operator detach)."""
    return DetachForcedError(f"The link '{link.name}' is force detached by the local Service Bus (injected).")


def sweep(conn: AmqpConnection, timeouts: IdleTimeouts, at: float) -> None:
    """Detach the connection's idle entity links; close the connection if it is idle as a whole."""
    from bridge.emulator.amqp import links

    busy = False
    link = conn.conn.link_head(Endpoint.LOCAL_ACTIVE)
    while link is not None:
        nxt = link.next(Endpoint.LOCAL_ACTIVE)
        consumer: Consumer | None = getattr(link, "sb_consumer", None)
        path: str = consumer.store.path if consumer is not None else getattr(link, "sb_path", "")
        if path and not links.is_request_node(path):
            last = consumer.active if consumer is not None else getattr(link, "sb_active", at)
            if at - last >= timeouts.link:
                links.force_detach(conn, link, idle_error(link, timeouts.link, consumer=consumer is not None))
                conn.last_activity = at
            else:
                busy = True
        link = nxt
    if not busy and at - conn.last_activity >= timeouts.connection and not conn.closed:
        close_idle(conn, timeouts.connection)


def close_idle(conn: AmqpConnection, timeout: float) -> None:
    """Close the connection with Service Bus's inactivity error."""
    millis = int(timeout * 1000)
    conn.conn.condition = Condition(
        CONNECTION_FORCED,
        f"The connection was inactive for more than the allowed {millis} milliseconds and is closed by "
        "container 'LinkTracker'.",
        {symbol("tracking-id"): str(uuid.uuid4())},
    )
    conn.conn.close()
    conn.broker.mark_dirty(conn)


def _hms(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
