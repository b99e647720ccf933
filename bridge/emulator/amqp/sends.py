"""Transfers from a client's sender into a queue or topic, with the injected send faults.

A transfer carries one message or, for the SDK's ``ServiceBusMessageBatch``, a batch envelope of several;
either way the namespace accepts all of them or none, and the transfer is settled ACCEPTED or REJECTED with
the broker's error. Faults act here: ``busy`` rejects with ServerBusy, ``stall`` leaves the transfer
unsettled (for ever, or until its delay has passed) and ``outage`` detaches the link.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from proton import Delivery, Link

from bridge.emulator.amqp.codec import MalformedMessageError, parse_message, split_transfer
from bridge.emulator.amqp.conditions import error_condition
from bridge.emulator.errors import (
    BrokerError,
    DecodeError,
    DetachForcedError,
    EntityNotFoundError,
    ServerBusyError,
)
from bridge.emulator.faults import FaultKind
from bridge.emulator.model.messages import IncomingMessage

if TYPE_CHECKING:
    from bridge.emulator.amqp.connection import AmqpConnection


def on_send(conn: AmqpConnection, dlv: Delivery, raw: bytes, path: str) -> None:
    """Store the messages of one complete transfer to ``path``, unless a fault trips first."""
    broker = conn.broker
    remaining = broker.throttled()
    if remaining is not None:
        conn.settle(dlv, ServerBusyError.throttled(remaining))
        return
    fault = broker.fault_for(path)
    if fault is not None and fault.kind is not FaultKind.THROTTLE and fault.trips(broker.rand):
        if fault.kind is FaultKind.BUSY:
            conn.settle(dlv, ServerBusyError("The server is busy (injected). Please retry."))
            return
        if fault.kind is FaultKind.STALL:
            if fault.delay is not None:
                loop = asyncio.get_running_loop()
                loop.call_later(fault.delay, _finish_stalled_send, conn, dlv, raw, path)
            return  # never settled: the client's send times out
        if fault.kind is FaultKind.OUTAGE:
            dlv.link.condition = error_condition(DetachForcedError("Entity unavailable (injected)."))
            dlv.link.close()
            broker.mark_dirty(conn)
            return
    _store_send(conn, dlv, raw, path)


def _finish_stalled_send(conn: AmqpConnection, dlv: Delivery, raw: bytes, path: str) -> None:
    if conn.closed or dlv.link.state & Link.LOCAL_CLOSED:
        return  # the client gave up on the link; its send already failed
    _store_send(conn, dlv, raw, path)
    conn.broker.after_io()  # outside a data_received: nobody else flushes the log and the answer


def _store_send(conn: AmqpConnection, dlv: Delivery, raw: bytes, path: str) -> None:
    broker = conn.broker
    ns = broker.namespace
    try:
        with_props = ns.is_topic(path)  # only subscription filters read the properties
        try:
            messages = [parse_message(s, with_props) for s in split_transfer(raw)]
        except MalformedMessageError as exc:
            raise DecodeError(f"The message could not be decoded: {exc}") from None
        incoming = [
            IncomingMessage(
                raw=m.raw,
                message_id=m.message_id,
                session_id=m.session_id,
                partition_key=m.partition_key,
                time_to_live=m.time_to_live,
                scheduled_at=m.scheduled_at,
                properties=m.properties,
            )
            for m in messages
        ]
        ns.send(path, incoming, broker.clock())
    except BrokerError as exc:
        conn.settle(dlv, exc)
        return
    conn.settle(dlv)
    _pump_path(conn, path)


def _pump_path(conn: AmqpConnection, path: str) -> None:
    # Hand the new messages to waiting receivers at once rather than on the next tick.
    broker = conn.broker
    ns = broker.namespace
    if ns.is_topic(path):
        topic = ns.topics[path.strip("/").lower()]
        for sub in topic.subscriptions.values():
            broker.pump_store(sub.store)
    else:
        try:
            broker.pump_store(ns.store(path))
        except EntityNotFoundError:
            return
