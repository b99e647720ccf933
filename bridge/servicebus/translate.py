"""Turn any exception from the Service Bus SDK into the bridge's ``NamespaceError`` tree.

The failure class is decided by ``bridge.core.error_classes.classify`` and nowhere else; this module only
picks the bridge exception type for that class:

=====================  ==================================================================================
class                  bridge exception
=====================  ==================================================================================
TRANSIENT              ``TransientNamespaceError`` (``NamespaceTimeoutError`` when it was a timeout, so a
                       caller's ``classify`` still sees ``timeout=True`` and starts the paired timer)
OUTAGE                 ``NamespaceOutageError`` (``AttemptDeadlineExceeded`` passes through unchanged)
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

from collections.abc import Callable
from typing import TypeVar

from bridge.core.error_classes import ErrorClass, classify
from bridge.core.outcomes import describe_error, scrub_secrets
from bridge.errors import (
    MessagePermanentError,
    NamespaceConfigurationError,
    NamespaceEntityNotFoundError,
    NamespaceError,
    NamespaceOutageError,
    NamespaceTimeoutError,
    TransientNamespaceError,
)

T = TypeVar("T")


def translate(exc: BaseException, namespace: str | None = None, context: str = "") -> NamespaceError:
    """The bridge exception for ``exc`` (not raised); ``context`` (e.g. ``"send to orders"``) is prefixed.

    A ``NamespaceError`` is returned as it is (its namespace filled in when missing), so translating twice
    changes nothing.
    """
    if isinstance(exc, NamespaceError):
        if exc.namespace is None:
            exc.namespace = namespace
        return exc
    verdict = classify(exc)
    where = " ".join(part for part in (namespace, context) if part)
    message = scrub_secrets(f"{where}: {describe_error(exc)}" if where else describe_error(exc))
    if verdict.error_class is ErrorClass.MESSAGE_PERMANENT:
        return MessagePermanentError(message, namespace=namespace)
    if verdict.error_class is ErrorClass.CONFIGURATION:
        if verdict.entity_missing:
            return NamespaceEntityNotFoundError(message, namespace=namespace)
        return NamespaceConfigurationError(message, namespace=namespace)
    if verdict.error_class is ErrorClass.OUTAGE:
        return NamespaceOutageError(message, namespace=namespace)
    if verdict.timeout:
        return NamespaceTimeoutError(message, namespace=namespace)
    return TransientNamespaceError(message, namespace=namespace)


def translated(call: Callable[[], T], namespace: str | None = None, context: str = "") -> T:
    """Run ``call``; any exception comes out as the bridge's ``NamespaceError`` with no chained cause.

    ``BaseException``s that are not ``Exception`` (KeyboardInterrupt, SystemExit) pass through.
    """
    try:
        return call()
    except Exception as exc:  # every SDK failure, whatever its type
        error = translate(exc, namespace, context)
    raise error from None
