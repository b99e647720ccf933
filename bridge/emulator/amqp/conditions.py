"""AMQP error conditions the way azure-servicebus reads them.

The SDK maps a condition's symbolic name to its exception type and indexes the condition's info map
unconditionally, so every condition we send carries one (with a tracking id, as Azure's do).
"""

from __future__ import annotations

import uuid

from proton import Condition, symbol

from bridge.emulator.errors import BrokerError

TIMEOUT = "com.microsoft:timeout"
TRACKING_ID = symbol("tracking-id")


def error_condition(exc: BrokerError) -> Condition:
    """The condition for a broker error, which the SDK turns into the exception Azure's would give."""
    return Condition(exc.condition, str(exc), {TRACKING_ID: str(uuid.uuid4())})


def timeout_condition(description: str) -> Condition:
    """``com.microsoft:timeout``: the SDK raises OperationTimeoutError for it."""
    return Condition(TIMEOUT, description, {TRACKING_ID: str(uuid.uuid4())})


def with_info(condition: Condition) -> Condition:
    """``condition`` with an info map (proton's own errors have none; the SDK needs one)."""
    return Condition(condition.name, condition.description, {TRACKING_ID: str(uuid.uuid4())})
