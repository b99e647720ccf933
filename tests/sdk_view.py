"""The SDK's view of a message the bridge sends: the ``ServiceBusMessage`` the SDK's send makes of it.

The bridge hands the SDK ``AmqpAnnotatedMessage``s; a test reads their fields through the SDK's own getters
on the message as the SDK converts it for the wire (the conversion every send, batch or schedule runs).
"""

from __future__ import annotations

from typing import Any

from azure.servicebus import ServiceBusMessage
from azure.servicebus._common.utils import transform_outbound_messages
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport


def as_sent(message: Any) -> ServiceBusMessage:
    """``message`` as the SDK sends it."""
    sent = transform_outbound_messages(message, ServiceBusMessage, PyamqpTransport.to_outgoing_amqp_message)
    assert isinstance(sent, ServiceBusMessage)
    return sent
