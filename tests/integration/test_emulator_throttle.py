"""Throttling as Service Bus does it: a penalty window in which every request of the namespace is refused.

``throttle`` trips on a request with its probability; from then on, for ``window`` seconds, every send,
management request and link attach is refused with ``com.microsoft:server-busy`` (the SDK's
``ServiceBusServerBusyError``), whatever the probability. ``busy`` alone refuses each send independently.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSender
from azure.servicebus.exceptions import ServiceBusServerBusyError

from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import EmulatorError
from tests.integration.sdk_conformance import sb_client

pytestmark = pytest.mark.timeout(90)

WINDOW = 1.5


def refused(sender: ServiceBusSender) -> bool:
    """Send one message; True if it was refused as server-busy."""
    try:
        sender.send_messages(ServiceBusMessage("x"))
    except ServiceBusServerBusyError:
        return True
    return False


def test_once_tripped_every_request_is_refused_for_the_window(
    namespace_factory: Callable[..., LocalNamespace],
) -> None:
    ns = namespace_factory("throttled", auto_create=True)
    with (
        sb_client(ns) as client,
        client.get_queue_sender("q1") as sender,
        client.get_queue_receiver("q1") as rx,
    ):
        sender.send_messages(ServiceBusMessage("warm"))
        # Given a throttle that trips on half the requests
        ns.control.throttle(window=WINDOW, probability=0.5)
        tripped_at = None
        for _ in range(40):
            if refused(sender):
                tripped_at = time.monotonic()
                break
        assert tripped_at is not None, "40 requests at probability 0.5 never tripped the throttle"
        # Then within the window every request is refused: sends (by chance alone: 1 in 32) ...
        outcomes = [refused(sender) for _ in range(5)]
        # ... and management requests too
        with pytest.raises(ServiceBusServerBusyError, match="throttled"):
            rx.peek_messages(max_message_count=1)
        assert time.monotonic() - tripped_at < WINDOW, "the machine was too slow to stay inside the window"
        assert outcomes == [True] * 5
        # And after the window requests are judged afresh: one gets through
        for _ in range(30):
            time.sleep(WINDOW + 0.1)
            if not refused(sender):
                break
        else:
            pytest.fail("no send got through after 30 penalty windows")
        # And restore ends throttling at once
        ns.control.restore()
        assert not refused(sender)


def test_throttle_is_validated(namespace_factory: Callable[..., LocalNamespace]) -> None:
    ns = namespace_factory("validated")
    for bad in ({"window": 0}, {"window": -1}):
        with pytest.raises(EmulatorError, match="window"):
            ns.control.throttle(**bad)  # type: ignore[arg-type]
    with pytest.raises(EmulatorError, match="window"):
        ns.control._fault("throttle")
    with pytest.raises(EmulatorError, match="entity"):
        ns.control._fault("throttle", window=1, entity="q1")
    assert ns.control.faults() == {"namespace": None, "entities": {}}
