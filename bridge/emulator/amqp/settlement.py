"""Dispositions of the deliveries we sent: a receiver's complete, abandon, defer, dead-letter or release.

In PEEK_LOCK the SDK settles each message with an AMQP outcome, which maps onto the store:

- ``accepted`` → complete;
- ``modified`` with ``undeliverable-here`` → defer; other ``modified`` → abandon;
- ``rejected`` → dead-letter, with ``DeadLetterReason``/``DeadLetterErrorDescription`` from the error info;
- ``released``, or settled without an outcome → release (the message was never looked at, so the
  delivery is not counted).

Properties to modify ride along as Service Bus takes them: a ``modified`` outcome's message annotations, and
the entries of a ``rejected`` outcome's error info other than the dead-letter reason and description. They
become application properties of the stored message before it is abandoned, deferred or dead-lettered.

We answer with the same outcome (or ``rejected`` with the broker's error, e.g. a lost lock), settle, and
pump the store so the freed message (or the dead-letter queue's new one) reaches a receiver at once.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from proton import Delivery, Link

from bridge.emulator.amqp import idle
from bridge.emulator.amqp.broker import Consumer
from bridge.emulator.amqp.codec import with_application_properties
from bridge.emulator.amqp.conditions import error_condition
from bridge.emulator.errors import BrokerError

if TYPE_CHECKING:
    from bridge.emulator.amqp.connection import AmqpConnection

log = logging.getLogger(__name__)


def on_disposition(conn: AmqpConnection, link: Link, dlv: Delivery) -> None:
    """Apply the client's outcome for one delivery of a consumer link to the store, then settle it."""
    consumer: Consumer | None = getattr(link, "sb_consumer", None)
    # ``sb_done`` marks a delivery we already settled: proton reports it again as the peer settles.
    if consumer is None or getattr(dlv, "sb_done", False):
        return
    state = dlv.remote_state
    if state is None or state == 0:
        if not dlv.settled:  # proton's ``settled`` means settled by the peer
            return
        state = Delivery.RELEASED  # settled without an outcome: the client gave the message back
    token: uuid.UUID | None = getattr(dlv, "sb_token", None)
    if token is None:
        dlv.settle()  # RECEIVE_AND_DELETE: nothing is locked, so the outcome changes nothing
        return
    store, now = consumer.store, conn.broker.clock()
    consumer.active = idle.now()
    log.debug("disposition %s for %s on %s", state, token, store.path)
    try:
        changes = _properties_to_modify(state, dlv)
        if changes:
            store.rewrite(token, now, lambda raw: with_application_properties(raw, changes, set()))
        if state == Delivery.ACCEPTED:
            store.complete(token, now)
        elif state == Delivery.MODIFIED and dlv.remote.undeliverable:
            store.defer(token, now)
        elif state == Delivery.REJECTED:
            store.dead_letter(token, now, *_dead_letter_reason(dlv))
        elif state == Delivery.RELEASED:
            store.release(token, now)
        else:
            store.abandon(token, now)
        if state == Delivery.MODIFIED:
            dlv.local.failed = dlv.remote.failed
            dlv.local.undeliverable = dlv.remote.undeliverable
        dlv.update(state)
    except BrokerError as exc:
        dlv.local.condition = error_condition(exc)
        dlv.update(Delivery.REJECTED)
    dlv.sb_done = True
    dlv.settle()
    broker = conn.broker
    broker.mark_dirty(conn)
    # A released message goes to the other consumers only: the SDK releases what arrives outside a
    # receive call, and handing it straight back would just bounce it until the credit is gone.
    broker.pump_store(store, skip=consumer if state == Delivery.RELEASED else None)
    if store.dlq is not None and state == Delivery.REJECTED:
        broker.pump_store(store.dlq)


_REASON_KEYS = {"DeadLetterReason", "DeadLetterErrorDescription"}


def _properties_to_modify(state: int, dlv: Delivery) -> dict[str, Any]:
    """The application properties a ``modified`` or ``rejected`` outcome asks to set (module docstring)."""
    if state == Delivery.MODIFIED:
        found: Any = dlv.remote.annotations
    elif state == Delivery.REJECTED and dlv.remote.condition is not None:
        found = dlv.remote.condition.info
    else:
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): v for k, v in found.items() if str(k) not in _REASON_KEYS}


def _dead_letter_reason(dlv: Delivery) -> tuple[str | None, str | None]:
    """The reason and description the SDK puts in a ``rejected`` outcome's error info."""
    condition = dlv.remote.condition
    info = (condition.info if condition else None) or {}
    if not isinstance(info, dict):
        return None, None
    return _text(info.get("DeadLetterReason")), _text(info.get("DeadLetterErrorDescription"))


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
