"""The one place that decides what a failure means: transient, outage, message-permanent or configuration.

There are four classes, decided in one place (``docs/replication.md``). Every worker, ping, syphon and the
adapters' exception translation ask ``classify`` here; nothing else inspects SDK exceptions.

The table is keyed by exception *class names* so the pure core needs no ``azure`` import; ``classify``
walks the exception's MRO, so subclasses (``CredentialUnavailableError`` is a
``ClientAuthenticationError``) and the bridge's own ``NamespaceError`` subclasses resolve. An exception
that matches nothing is TRANSIENT (``known=False``): it is retried, and ``escalate`` turns it into an
outage if it persists, so an unforeseen error can delay a message but never drop or dead-letter it.

Choices that are not obvious (see ``docs/servicebus-sdk.md`` for the SDK's own retry flags):

- ``OperationTimeoutError`` is TRANSIENT with ``timeout=True``. The SDK marks it retryable and keeps the
  connection (``shutdown_handler=False``): the broker was reachable but did not settle in time, which
  happens under load. One slow settlement must not swap roles for every worker, so the same namespace is
  retried briefly and ``escalate`` promotes timeouts that keep coming to OUTAGE. Paired mode still starts
  its FailoverInterval timer on the first timeout (``timeout=True``): the .NET paired client started it
  on a non-transient error *or* a TimeoutException (``docs/references.md``).
- ``AttemptDeadlineExceeded`` (the bridge's hard deadline, e.g. a blackholed endpoint) is OUTAGE: the SDK's
  own retries were already inside that deadline, and a hung client is discarded.
- ``ServiceBusQuotaExceededError`` is OUTAGE: the entity is full (or out of connections); the message is
  fine and the partner namespace can take it.
- ``MessagingEntityDisabledError`` is OUTAGE (the entity is switched off; the SDK calls it retryable);
  ``MessagingEntityNotFoundError`` and authentication/authorization errors are CONFIGURATION: alert loudly,
  treat the namespace as unavailable for this entity.
- Receiver/settlement errors (lock lost, already settled, session cannot be locked, message not found)
  are TRANSIENT: the broker redelivers or the operation can be repeated later; they say nothing about the
  namespace's health.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class ErrorClass(StrEnum):
    """The four failure classes (``docs/replication.md``)."""

    TRANSIENT = "transient"
    """Retry the same namespace, briefly."""
    OUTAGE = "outage"
    """The namespace (or entity) is down: fail over."""
    MESSAGE_PERMANENT = "message_permanent"
    """This message will never be accepted: dead-letter it locally with the reason."""
    CONFIGURATION = "configuration"
    """Credentials or entity are wrong: alert loudly and treat the namespace as unavailable."""


_T = ErrorClass.TRANSIENT
_O = ErrorClass.OUTAGE
_P = ErrorClass.MESSAGE_PERMANENT
_C = ErrorClass.CONFIGURATION

ERROR_CLASSES: Mapping[str, ErrorClass] = MappingProxyType(
    {
        # azure.servicebus.exceptions (7.x), every class in the module.
        "ServiceBusError": _T,
        "ServiceBusConnectionError": _O,
        "ServiceBusCommunicationError": _O,
        "ServiceBusAuthenticationError": _C,
        "ServiceBusAuthorizationError": _C,
        "OperationTimeoutError": _T,
        "MessageSizeExceededError": _P,
        "MessageAlreadySettled": _T,
        "MessageLockLostError": _T,
        "SessionLockLostError": _T,
        "MessageNotFoundError": _T,
        "MessagingEntityNotFoundError": _C,
        "MessagingEntityDisabledError": _O,
        "MessagingEntityAlreadyExistsError": _C,
        "ServiceBusQuotaExceededError": _O,
        "ServiceBusServerBusyError": _T,
        "SessionCannotBeLockedError": _T,
        "AutoLockRenewFailed": _T,
        "AutoLockRenewTimeout": _T,
        # azure.core.exceptions, raised by ServiceBusAdministrationClient and credentials.
        "AzureError": _T,
        "ServiceRequestError": _O,
        "ServiceRequestTimeoutError": _O,
        "ServiceResponseError": _T,
        "ServiceResponseTimeoutError": _T,
        "HttpResponseError": _T,
        "ClientAuthenticationError": _C,
        "ResourceNotFoundError": _C,
        "ResourceExistsError": _C,
        "TooManyRedirectsError": _C,
        "DecodeError": _T,
        # bridge.errors: adapters raise these after translating driver errors.
        "TransientNamespaceError": _T,
        "NamespaceOutageError": _O,
        "AttemptDeadlineExceeded": _O,
        "NamespaceTimeoutError": _T,
        "NamespaceEntityNotFoundError": _C,
        "NamespaceConfigurationError": _C,
        "MessagePermanentError": _P,
        "InvalidMessageError": _P,
        "MessageTooLargeError": _P,
        "ConfigurationError": _C,
        # Builtins that reach a send path from sockets or asyncio.wait_for.
        "TimeoutError": _O,
        "ConnectionError": _O,
        "OSError": _O,
    }
)
"""Exception class name -> failure class. Looked up along the MRO, nearest class first."""

TIMEOUT_NAMES: frozenset[str] = frozenset(
    {
        "OperationTimeoutError",
        "AttemptDeadlineExceeded",
        "NamespaceTimeoutError",
        "ServiceRequestTimeoutError",
        "ServiceResponseTimeoutError",
        "AutoLockRenewTimeout",
        "TimeoutError",
    }
)
"""Class names that are timeouts: they start the paired FailoverInterval timer even when TRANSIENT."""

ENTITY_MISSING_NAMES: frozenset[str] = frozenset(
    {"MessagingEntityNotFoundError", "ResourceNotFoundError", "NamespaceEntityNotFoundError"}
)
"""Class names meaning the entity does not exist (the syphon dead-letters such messages)."""


@dataclass(frozen=True)
class Classification:
    """The verdict on one exception type.

    ``matched`` is the class name that decided (the exception's own name when nothing matched);
    ``known`` is False for the TRANSIENT fallback.
    """

    error_class: ErrorClass
    matched: str
    known: bool = True
    timeout: bool = False
    entity_missing: bool = False


def classify_type(exc_type: type[BaseException]) -> Classification:
    """Classify an exception type by walking its MRO against ``ERROR_CLASSES``."""
    names = [klass.__name__ for klass in exc_type.__mro__]
    timeout = any(name in TIMEOUT_NAMES for name in names)
    entity_missing = any(name in ENTITY_MISSING_NAMES for name in names)
    for name in names:
        error_class = ERROR_CLASSES.get(name)
        if error_class is not None:
            return Classification(error_class, name, True, timeout, entity_missing)
    return Classification(ErrorClass.TRANSIENT, exc_type.__name__, False, timeout, entity_missing)


def classify(exc: BaseException) -> Classification:
    """Classify an exception instance (its type decides; the message is never parsed)."""
    return classify_type(type(exc))


@dataclass(frozen=True)
class EscalationPolicy:
    """When transient failures in a row stop being transient.

    A namespace that answers ``ServerBusy`` (or times out) for ``max_consecutive`` attempts in a row, or
    for longer than ``max_duration`` seconds since the first of them, is treated as down.
    """

    max_consecutive: int = 3
    max_duration: float = 10.0

    def __post_init__(self) -> None:
        if self.max_consecutive < 1:
            raise ValueError("max_consecutive must be at least 1")
        if self.max_duration < 0:
            raise ValueError("max_duration must not be negative")


@dataclass(frozen=True)
class TransientStreak:
    """Transient failures in a row against one namespace (per entity), and when the first one happened."""

    count: int = 0
    first_at: float | None = None


def escalate(
    streak: TransientStreak,
    error_class: ErrorClass | None,
    now: float,
    policy: EscalationPolicy,
) -> tuple[ErrorClass | None, TransientStreak]:
    """The effective class of an attempt's result and the streak after it.

    ``error_class`` None means success, which ends the streak. A TRANSIENT failure extends the streak and is
    promoted to OUTAGE once the streak reaches the policy's count or age; the streak then starts over, so
    the next busy answer after a failover is judged afresh. Any other class ends the streak unchanged.
    """
    if error_class is not ErrorClass.TRANSIENT:
        return error_class, TransientStreak()
    first_at = now if streak.first_at is None else streak.first_at
    count = streak.count + 1
    if count >= policy.max_consecutive or now - first_at >= policy.max_duration:
        return ErrorClass.OUTAGE, TransientStreak()
    return ErrorClass.TRANSIENT, TransientStreak(count, first_at)
