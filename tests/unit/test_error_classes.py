"""The failure classes: the decision each bridge error class carries, the adapter's table for the SDK's
exceptions (every one of them, azure-core's, builtins, subclasses), and escalation."""

from __future__ import annotations

import inspect

import azure.core.exceptions as core_exceptions
import azure.servicebus.exceptions as sb_exceptions
import pytest

from bridge import errors
from bridge.core.error_classes import (
    Classification,
    ErrorClass,
    EscalationPolicy,
    TransientStreak,
    classify,
    classify_type,
    escalate,
)
from bridge.servicebus.translate import SDK_ERROR_CLASSES, classify_sdk_type

T = ErrorClass.TRANSIENT
O = ErrorClass.OUTAGE  # noqa: E741 - reads as the table's letter
P = ErrorClass.MESSAGE_PERMANENT
C = ErrorClass.CONFIGURATION

# ---- the bridge's own classes: each carries its decision ------------------------------------------------

BRIDGE_TABLE: list[tuple[type[errors.BridgeError], Classification]] = [
    (errors.TransientNamespaceError, Classification(T)),
    (errors.NamespaceTimeoutError, Classification(T, timeout=True)),
    (errors.NamespaceOutageError, Classification(O)),
    (errors.AttemptDeadlineExceeded, Classification(O, timeout=True)),
    (errors.NamespaceRefusedError, Classification(O, address_refused=True)),
    (errors.EndpointRefusedError, Classification(O, address_refused=True)),
    (errors.RefusedMidAttemptError, Classification(O, timeout=True, address_refused=True)),
    (errors.NamespaceConfigurationError, Classification(C)),
    (errors.NamespaceEntityNotFoundError, Classification(C, entity_missing=True)),
    (errors.NamespaceRoleMissingError, Classification(C)),
    (errors.MessagePermanentError, Classification(P)),
    (errors.InvalidMessageError, Classification(P)),
    (errors.MessageTooLargeError, Classification(P)),
    (errors.ConfigurationError, Classification(C)),
]


@pytest.mark.parametrize(("klass", "expected"), BRIDGE_TABLE, ids=[k.__name__ for k, _ in BRIDGE_TABLE])
def test_a_bridge_class_carries_its_own_decision(
    klass: type[errors.BridgeError], expected: Classification
) -> None:
    # Declared on the class itself: a class that loses its line fails here even if an ancestor has one.
    assert "error_class" in vars(klass)
    assert classify_type(klass) == expected
    # The adapter's translation keeps it: the bridge's classes are not in the SDK table.
    assert classify_sdk_type(klass) == expected


def test_every_namespace_error_class_is_in_the_table() -> None:
    namespace_classes = {
        obj
        for obj in vars(errors).values()
        if inspect.isclass(obj)
        and issubclass(obj, errors.NamespaceError)
        and obj is not errors.NamespaceError
    }
    assert namespace_classes <= {klass for klass, _ in BRIDGE_TABLE}


@pytest.mark.parametrize(
    "klass",
    [
        errors.BridgeError,
        errors.NamespaceError,
        errors.StateStoreUnavailableError,
        errors.OutboxUnavailableError,
        errors.LeaseLostError,
        errors.InvariantError,
        errors.BackpressureError,
    ],
)
def test_a_bridge_error_that_says_nothing_about_a_namespace_is_an_unknown_transient_one(
    klass: type[errors.BridgeError],
) -> None:
    assert klass.error_class is None
    assert classify_type(klass) == Classification(T)


def test_an_unknown_exception_is_transient() -> None:
    assert classify(KeyError("x")) == Classification(T)


def test_the_core_needs_the_adapter_for_sdk_exceptions() -> None:
    # The core reads decisions from bridge classes only; an SDK exception is translated first.
    assert classify(sb_exceptions.ServiceBusConnectionError(message="lost")) == Classification(T)
    assert classify_sdk_type(sb_exceptions.ServiceBusConnectionError) == Classification(O)


def test_the_sdk_table_names_no_bridge_class() -> None:
    bridge_names = {name for name, obj in vars(errors).items() if inspect.isclass(obj)}
    assert set(SDK_ERROR_CLASSES) & bridge_names == set()


# ---- exceptions the bridge does not own: the adapter's table ------------------------------------------

SDK_TABLE = [
    ("ServiceBusError", T),
    ("ServiceBusConnectionError", O),
    ("ServiceBusCommunicationError", O),
    ("ServiceBusAuthenticationError", C),
    ("ServiceBusAuthorizationError", C),
    ("OperationTimeoutError", T),
    ("MessageSizeExceededError", P),
    ("MessageAlreadySettled", T),
    ("MessageLockLostError", T),
    ("SessionLockLostError", T),
    ("MessageNotFoundError", T),
    ("MessagingEntityNotFoundError", C),
    ("MessagingEntityDisabledError", O),
    ("MessagingEntityAlreadyExistsError", C),
    ("ServiceBusQuotaExceededError", O),
    ("ServiceBusServerBusyError", T),
    ("SessionCannotBeLockedError", T),
    ("AutoLockRenewFailed", T),
    ("AutoLockRenewTimeout", T),
]


@pytest.mark.parametrize(("name", "expected"), SDK_TABLE)
def test_every_sdk_exception_resolves_through_its_own_class(name: str, expected: ErrorClass) -> None:
    assert SDK_ERROR_CLASSES[name] is expected
    assert classify_sdk_type(getattr(sb_exceptions, name)).error_class is expected


def test_the_table_covers_every_exception_class_of_the_installed_sdk() -> None:
    installed = {
        name
        for name, obj in vars(sb_exceptions).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == sb_exceptions.__name__
    }
    assert installed == {name for name, _ in SDK_TABLE}
    assert installed <= set(SDK_ERROR_CLASSES)


@pytest.mark.parametrize(
    ("klass", "expected"),
    [
        (core_exceptions.AzureError, T),
        (core_exceptions.ServiceRequestError, O),
        (core_exceptions.ServiceRequestTimeoutError, O),
        (core_exceptions.ServiceResponseError, T),
        (core_exceptions.ServiceResponseTimeoutError, T),
        (core_exceptions.HttpResponseError, T),
        (core_exceptions.ClientAuthenticationError, C),
        (core_exceptions.ResourceNotFoundError, C),
        (core_exceptions.ResourceExistsError, C),
        (TimeoutError, O),
        (ConnectionRefusedError, O),
        (ConnectionResetError, O),
        (OSError, O),
        (KeyError, T),
    ],
)
def test_azure_core_and_builtin_types(klass: type[BaseException], expected: ErrorClass) -> None:
    assert classify_sdk_type(klass).error_class is expected


def test_a_subclass_resolves_to_its_nearest_listed_ancestor() -> None:
    # Given an exception type the table does not name, derived from the SDK's connection error
    class VendorConnectionError(sb_exceptions.ServiceBusConnectionError):
        pass

    # Then the MRO walk finds the SDK class (an outage), not its base ServiceBusError (transient)
    assert classify_sdk_type(VendorConnectionError) == Classification(O)


@pytest.mark.parametrize(
    ("klass", "timeout"),
    [
        (sb_exceptions.OperationTimeoutError, True),
        (errors.AttemptDeadlineExceeded, True),
        (TimeoutError, True),
        (core_exceptions.ServiceResponseTimeoutError, True),
        (sb_exceptions.ServiceBusServerBusyError, False),
        (sb_exceptions.ServiceBusConnectionError, False),
    ],
)
def test_timeouts_are_flagged_for_the_paired_timer(klass: type[BaseException], timeout: bool) -> None:
    assert classify_sdk_type(klass).timeout is timeout


@pytest.mark.parametrize(
    ("klass", "missing"),
    [
        (sb_exceptions.MessagingEntityNotFoundError, True),
        (core_exceptions.ResourceNotFoundError, True),
        (sb_exceptions.ServiceBusAuthenticationError, False),
    ],
)
def test_entity_missing_is_told_apart_from_other_configuration_errors(
    klass: type[BaseException], missing: bool
) -> None:
    verdict = classify_sdk_type(klass)
    assert verdict.error_class is C
    assert verdict.entity_missing is missing


POLICY = EscalationPolicy(max_consecutive=3, max_duration=10.0)


@pytest.mark.parametrize(
    ("streak", "error_class", "now", "effective", "after"),
    [
        # success and non-transient classes end the streak and pass through
        (TransientStreak(2, 100.0), None, 101.0, None, TransientStreak()),
        (TransientStreak(2, 100.0), O, 101.0, O, TransientStreak()),
        (TransientStreak(2, 100.0), P, 101.0, P, TransientStreak()),
        (TransientStreak(2, 100.0), C, 101.0, C, TransientStreak()),
        # transient failures accumulate
        (TransientStreak(), T, 100.0, T, TransientStreak(1, 100.0)),
        (TransientStreak(1, 100.0), T, 101.0, T, TransientStreak(2, 100.0)),
        # the third in a row is an outage; the streak starts over
        (TransientStreak(2, 100.0), T, 102.0, O, TransientStreak()),
        # a streak older than max_duration is an outage even if short
        (TransientStreak(1, 100.0), T, 110.0, O, TransientStreak()),
        (TransientStreak(1, 100.0), T, 109.9, T, TransientStreak(2, 100.0)),
    ],
)
def test_escalation_table(
    streak: TransientStreak,
    error_class: ErrorClass | None,
    now: float,
    effective: ErrorClass | None,
    after: TransientStreak,
) -> None:
    assert escalate(streak, error_class, now, POLICY) == (effective, after)


def test_busy_that_persists_becomes_an_outage() -> None:
    # Given a namespace answering ServerBusy on every attempt, one second apart
    streak = TransientStreak()
    seen = []
    for second in range(5):
        effective, streak = escalate(streak, T, 1000.0 + second, POLICY)
        seen.append(effective)
    # Then the third answer escalates, and the count starts again after it
    assert seen == [T, T, O, T, T]


def test_zero_duration_escalates_every_transient_failure() -> None:
    policy = EscalationPolicy(max_consecutive=5, max_duration=0.0)
    assert escalate(TransientStreak(), T, 5.0, policy)[0] is O


@pytest.mark.parametrize(("count", "duration"), [(0, 1.0), (1, -1.0)])
def test_escalation_policy_rejects_nonsense(count: int, duration: float) -> None:
    with pytest.raises(ValueError, match="max_"):
        EscalationPolicy(count, duration)


def test_escalation_policy_bounds() -> None:
    EscalationPolicy(max_consecutive=1, max_duration=0.0)  # escalate at the first transient failure
    with pytest.raises(ValueError, match=r"^max_consecutive must be at least 1$"):
        EscalationPolicy(max_consecutive=0)
    with pytest.raises(ValueError, match=r"^max_duration must not be negative$"):
        EscalationPolicy(max_duration=-0.5)
