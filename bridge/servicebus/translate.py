"""Turn any exception from the Service Bus SDK into the bridge's ``NamespaceError`` tree.

Exceptions the bridge does not own get their failure class here, from ``SDK_ERROR_CLASSES``: a table keyed
by class *name* (the SDK's ``azure.servicebus.exceptions``, azure-core's exceptions raised by the
administration client and credentials, and the builtins a socket raises), looked up along the exception's
MRO, nearest class first, so a subclass the table does not name (``CredentialUnavailableError`` is a
``ClientAuthenticationError``) resolves to its ancestor. A bridge error keeps the decision its class
carries (``bridge.core.error_classes.classify``); an exception that matches nothing is TRANSIENT.

Choices that are not obvious (see ``docs/servicebus-sdk.md`` for the SDK's own retry flags):

- ``OperationTimeoutError`` is TRANSIENT with ``timeout``. The SDK marks it retryable and keeps the
  connection (``shutdown_handler=False``): the broker was reachable but did not settle in time, which
  happens under load. One slow settlement must not swap roles for every worker, so the same namespace is
  retried briefly and ``escalate`` promotes timeouts that keep coming to OUTAGE; paired mode still starts
  its FailoverInterval timer on the first timeout (docs/replication.md).
- ``ServiceBusQuotaExceededError`` is OUTAGE: the entity is full (or out of connections); the message is
  fine and the partner namespace can take it.
- ``MessagingEntityDisabledError`` is OUTAGE (the entity is switched off; the SDK calls it retryable);
  ``MessagingEntityNotFoundError`` and authentication/authorization errors are CONFIGURATION: alert loudly,
  treat the namespace as unavailable for this entity.
- A refusal that names a missing right (``'Listen' claim(s) are required``, whatever SDK class carries it)
  is ``NamespaceRoleMissingError``, a CONFIGURATION error whose message names the role to assign
  (``bridge.core.access``).
- "CBS Authentication Expired" (``IDLE_LINK_EXPIRY``: a token that ran out on an idle link) is TRANSIENT,
  whatever class carries it: the next attempt gets a fresh token.
- A generic ``ServiceBusError`` is classified by the error it wraps (``inner_exception``): the SDK wraps a
  credential's ``ClientAuthenticationError`` (no token could be obtained) that way.
- Receiver/settlement errors (lock lost, already settled, session cannot be locked, message not found)
  are TRANSIENT: the broker redelivers or the operation can be repeated later; they say nothing about the
  namespace's health.

The bridge exception for each class:

=====================  ==================================================================================
class                  bridge exception
=====================  ==================================================================================
TRANSIENT              ``TransientNamespaceError`` (``NamespaceTimeoutError`` when it was a timeout, so a
                       caller's ``classify`` still sees ``timeout`` and starts the paired timer)
OUTAGE                 ``NamespaceOutageError`` (``AttemptDeadlineExceeded`` and the connect probe's
                       ``EndpointRefusedError`` pass through unchanged)
MESSAGE_PERMANENT      ``MessagePermanentError``
CONFIGURATION          ``NamespaceConfigurationError`` (``NamespaceEntityNotFoundError`` when the entity
                       is missing, so the syphon can dead-letter with that reason)
=====================  ==================================================================================

The message is ``describe_error`` of the original (class name and text, secrets scrubbed, shortened) with
the namespace role in front. Callers raise the result *outside* their ``except`` block, so the SDK
exception is not even kept as ``__context__`` (error reporters walk the chain; SDK texts can carry SAS
tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TypeVar

from bridge.core.access import missing_right, role_advice
from bridge.core.error_classes import Classification, ErrorClass, classify_type
from bridge.core.outcomes import describe_error, scrub_secrets
from bridge.errors import (
    BridgeError,
    MessagePermanentError,
    NamespaceConfigurationError,
    NamespaceEntityNotFoundError,
    NamespaceError,
    NamespaceOutageError,
    NamespaceRefusedError,
    NamespaceRoleMissingError,
    NamespaceTimeoutError,
    TransientNamespaceError,
)

T = TypeVar("T")

_T = ErrorClass.TRANSIENT
_O = ErrorClass.OUTAGE
_P = ErrorClass.MESSAGE_PERMANENT
_C = ErrorClass.CONFIGURATION

SDK_ERROR_CLASSES: Mapping[str, ErrorClass] = MappingProxyType(
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
        # Builtins that reach a send path from sockets or asyncio.wait_for.
        "TimeoutError": _O,
        "ConnectionError": _O,
        "OSError": _O,
    }
)
"""SDK exception class name -> failure class. Looked up along the MRO, nearest class first."""

SDK_TIMEOUTS: frozenset[str] = frozenset(
    {
        "OperationTimeoutError",
        "ServiceRequestTimeoutError",
        "ServiceResponseTimeoutError",
        "AutoLockRenewTimeout",
        "TimeoutError",
    }
)
"""SDK class names that are timeouts: they start the paired FailoverInterval timer even when TRANSIENT."""

IDLE_LINK_EXPIRY = "CBS Authentication Expired"
"""The SDK's text when a link's Entra ID token ran out while the link sat idle (it renews only on links that
work): TRANSIENT, because the next attempt reconnects with a fresh token; it says nothing about the
namespace's health, so it must not count as an outage (the SDK wraps it in ``ServiceBusConnectionError``)."""

SDK_ENTITY_MISSING: frozenset[str] = frozenset({"MessagingEntityNotFoundError", "ResourceNotFoundError"})
"""SDK class names meaning the entity does not exist (the syphon dead-letters such messages)."""


def classify_sdk_type(exc_type: type[BaseException]) -> Classification:
    """The failure class of an exception type the bridge does not own (a bridge error keeps its own)."""
    if issubclass(exc_type, BridgeError):
        return classify_type(exc_type)
    names = [klass.__name__ for klass in exc_type.__mro__]
    timeout = any(name in SDK_TIMEOUTS for name in names)
    entity_missing = any(name in SDK_ENTITY_MISSING for name in names)
    error_class = next((SDK_ERROR_CLASSES[n] for n in names if n in SDK_ERROR_CLASSES), _T)
    return Classification(error_class, timeout, entity_missing)


def translate(exc: BaseException, namespace: str | None = None, context: str = "") -> NamespaceError:
    """The bridge exception for ``exc`` (not raised); ``context`` (e.g. ``"send to orders"``) is prefixed.

    A ``NamespaceError`` is returned as it is (its namespace filled in when missing), so translating twice
    changes nothing.
    """
    if isinstance(exc, NamespaceError):
        if exc.namespace is None:
            exc.namespace = namespace
        return exc
    verdict = classify_sdk_type(type(_wrapped(exc)))
    if IDLE_LINK_EXPIRY in str(exc):
        verdict = Classification(ErrorClass.TRANSIENT)
    where = " ".join(part for part in (namespace, context) if part)
    message = scrub_secrets(f"{where}: {describe_error(exc)}" if where else describe_error(exc))
    if verdict.error_class is ErrorClass.MESSAGE_PERMANENT:
        return MessagePermanentError(message, namespace=namespace)
    right = missing_right(describe_error(exc))
    if right is not None:
        where = " ".join(part for part in (namespace, context) if part)
        advice = f"{where}: {role_advice(right)}" if where else role_advice(right)
        return NamespaceRoleMissingError(advice, namespace=namespace, right=right)
    if verdict.error_class is ErrorClass.CONFIGURATION:
        if verdict.entity_missing:
            return NamespaceEntityNotFoundError(message, namespace=namespace)
        return NamespaceConfigurationError(message, namespace=namespace)
    if verdict.error_class is ErrorClass.OUTAGE:
        if _connection_refused(exc):
            return NamespaceRefusedError(message, namespace=namespace)
        return NamespaceOutageError(message, namespace=namespace)
    if verdict.timeout:
        return NamespaceTimeoutError(message, namespace=namespace)
    return TransientNamespaceError(message, namespace=namespace)


def _connection_refused(exc: BaseException) -> bool:
    """Whether a ``ConnectionRefusedError`` is among the errors ``exc`` wraps (the SDK keeps the socket's
    error as ``inner_exception``, or chains it): the address refused, so the whole namespace is down.
    The error's type decides, never its text."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return True
        inner = getattr(current, "inner_exception", None)
        todo.extend(
            [inner if isinstance(inner, BaseException) else None, current.__cause__, current.__context__]
        )
    return False


def _wrapped(exc: BaseException) -> BaseException:
    """The error a generic ``ServiceBusError`` wraps, if any: the SDK wraps what it does not know
    (``ServiceBusError("Handler failed: ...", error=<original>)``), e.g. a credential's
    ``ClientAuthenticationError`` when no token can be obtained, which must stay a configuration error."""
    inner = getattr(exc, "inner_exception", None)
    if type(exc).__name__ == "ServiceBusError" and isinstance(inner, BaseException):
        return inner
    return exc


def translated(call: Callable[[], T], namespace: str | None = None, context: str = "") -> T:
    """Run ``call``; any exception comes out as the bridge's ``NamespaceError`` with no chained cause.

    ``BaseException``s that are not ``Exception`` (KeyboardInterrupt, SystemExit) pass through.
    """
    try:
        return call()
    except Exception as exc:  # every SDK failure, whatever its type
        error = translate(exc, namespace, context)
    raise error from None
