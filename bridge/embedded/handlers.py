"""Handlers for the receivers that ``bridge up`` and ``docker/compose.yaml`` start: they only log.

``bridge receive orders --handler bridge.embedded.handlers:log_message`` logs one INFO line per message
(MessageId, namespace, size), never the body. Replace it with your application's handler.
"""

from __future__ import annotations

import logging

from bridge.core.received import ReceivedMessage

log = logging.getLogger(__name__)


def log_message(message: ReceivedMessage) -> None:
    """Log that ``message`` arrived (the body stays out of the log)."""
    log.info(
        "received %s on %s from the %s namespace (%d bytes)",
        message.message_id,
        message.entity,
        message.namespace,
        len(message.body),
    )
