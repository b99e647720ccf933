"""The emulator's error classes: one per condition, each saying what a client does with it."""

from __future__ import annotations

import inspect

import pytest

from bridge.emulator import errors
from bridge.errors import BridgeError, EmulatorError

CLASSES = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, errors.BrokerError) and cls.__module__ == errors.__name__
]

# What the SDK does with each condition: its retry policy's no_retry list (not-found, message-size-exceeded,
# resource-limit-exceeded, not-allowed, unauthorized-access, decode-error, lock lost, argument-error) and
# its exception classes (ServiceBusServerBusyError, ServiceBusConnectionError for detach-forced and
# SessionCannotBeLockedError are retryable; MessageNotFoundError, MessagingEntityAlreadyExistsError not).
EXPECTED = {
    errors.BrokerError: ("amqp:internal-error", True),
    errors.EntityNotFoundError: ("amqp:not-found", False),
    errors.EntityAlreadyExistsError: ("com.microsoft:entity-already-exists", False),
    errors.MessageSizeExceededError: ("amqp:link:message-size-exceeded", False),
    errors.QuotaExceededError: ("amqp:resource-limit-exceeded", False),
    errors.InvalidOperationError: ("amqp:not-allowed", False),
    errors.ArgumentError: ("com.microsoft:argument-error", False),
    errors.MessageLockLostError: ("com.microsoft:message-lock-lost", False),
    errors.SessionLockLostError: ("com.microsoft:session-lock-lost", False),
    errors.SessionCannotBeLockedError: ("com.microsoft:session-cannot-be-locked", True),
    errors.MessageNotFoundError: ("com.microsoft:message-not-found", False),
    errors.ServerBusyError: ("com.microsoft:server-busy", True),
    errors.UnauthorizedError: ("amqp:unauthorized-access", False),
    errors.DetachForcedError: ("amqp:link:detach-forced", True),
    errors.DecodeError: ("amqp:decode-error", False),
}


def test_every_class_is_in_the_table() -> None:
    assert set(CLASSES) == set(EXPECTED)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_condition_and_retry_decision(cls: type[errors.BrokerError]) -> None:
    condition, retryable = EXPECTED[cls]
    assert (cls.condition, cls.retryable) == (condition, retryable)
    # Decided by each class itself, not inherited by accident
    assert "retryable" in vars(cls)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_shape(cls: type[errors.BrokerError]) -> None:
    assert issubclass(cls, EmulatorError) and issubclass(cls, BridgeError)
    assert cls.__name__.endswith("Error")
    assert cls.__doc__ and len(cls.__doc__.strip().splitlines()) == 1
    assert 400 <= cls.http_status < 600


def test_conditions_are_distinct() -> None:
    conditions = [cls.condition for cls in CLASSES]
    assert len(conditions) == len(set(conditions))
