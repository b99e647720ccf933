"""How the local Service Bus refuses an operation: the errors Azure would give, one class per condition.

Every class is a ``BrokerError`` (under ``bridge.errors.EmulatorError``, the one root the emulator shares
with the bridge). ``condition`` is the AMQP error condition the emulator sends on a rejected transfer, a
closed link or a management response; the SDK maps it to its own exception class (its pyamqp transport's
``_ERROR_CODE_TO_ERROR_MAPPING``). ``http_status`` is what the management endpoint answers instead, which
azure-core maps to ``ResourceNotFoundError`` (404), ``ResourceExistsError`` (409),
``ClientAuthenticationError`` (401) and so on.

``retryable`` says what the SDK does with the condition: its retry policy retries every condition except
those in its ``no_retry`` list (not-found, message-size-exceeded, resource-limit-exceeded, not-allowed,
unauthorized-access, decode-error, the lock-lost and argument codes ...), and the exception classes agree
(``ServiceBusServerBusyError`` and ``ServiceBusConnectionError`` are retryable, ``MessageSizeExceededError``,
``MessageNotFoundError`` or ``MessagingEntityNotFoundError`` are not). The emulator itself never retries;
the flag documents what a client seeing the condition should do.

Class names follow the SDK exception each condition becomes, without the SDK's ``ServiceBus``/``Messaging``
prefixes: the module says whose errors they are.
"""

from __future__ import annotations

from bridge.errors import EmulatorError


class BrokerError(EmulatorError):
    """The local Service Bus refuses an operation the way Azure does (``amqp:internal-error``: retryable)."""

    condition: str = "amqp:internal-error"
    http_status: int = 500
    retryable = True


class EntityNotFoundError(BrokerError):
    """The entity (queue, topic, subscription, rule) or management resource does not exist."""

    condition = "amqp:not-found"
    http_status = 404
    retryable = False


class EntityAlreadyExistsError(BrokerError):
    """An entity with that path exists already."""

    condition = "com.microsoft:entity-already-exists"
    http_status = 409
    retryable = False


class MessageSizeExceededError(BrokerError):
    """A message (or batch) exceeds the entity's maximum message size."""

    condition = "amqp:link:message-size-exceeded"
    http_status = 413
    retryable = False


class QuotaExceededError(BrokerError):
    """The entity is at MaxSizeInMegabytes; sending again will not help until a receiver drains it."""

    condition = "amqp:resource-limit-exceeded"
    http_status = 403
    retryable = False


class InvalidOperationError(BrokerError):
    """The operation is not allowed in this state (e.g. no SessionId on a session entity)."""

    condition = "amqp:not-allowed"
    http_status = 400
    retryable = False


class ArgumentError(BrokerError):
    """An argument (a description field, a filter, a fault) is malformed."""

    condition = "com.microsoft:argument-error"
    http_status = 400
    retryable = False


class MessageLockLostError(BrokerError):
    """The lock token is unknown or its lock expired."""

    condition = "com.microsoft:message-lock-lost"
    http_status = 410
    retryable = False


class SessionLockLostError(BrokerError):
    """The session lock expired or belongs to another receiver."""

    condition = "com.microsoft:session-lock-lost"
    http_status = 410
    retryable = False


class SessionCannotBeLockedError(BrokerError):
    """The session is locked by another receiver, or no session is available (retryable: it may free up)."""

    condition = "com.microsoft:session-cannot-be-locked"
    http_status = 409
    retryable = True


class MessageNotFoundError(BrokerError):
    """No message with that sequence number (deferred or scheduled) exists."""

    condition = "com.microsoft:message-not-found"
    http_status = 404
    retryable = False


class ServerBusyError(BrokerError):
    """The namespace is throttling (fault control ``busy``/``throttle``); the SDK backs off and retries."""

    @classmethod
    def throttled(cls, remaining: float) -> ServerBusyError:
        """The refusal inside a penalty window, worded like Service Bus's (which names the wait)."""
        return cls(
            "The request was terminated because the namespace is being throttled (injected). "
            f"Please wait {max(1, round(remaining))} seconds and try again."
        )

    condition = "com.microsoft:server-busy"
    http_status = 503
    retryable = True


class UnauthorizedError(BrokerError):
    """A SAS token is missing, expired, signed with a wrong key or scoped to another entity."""

    condition = "amqp:unauthorized-access"
    http_status = 401
    retryable = False


class DetachForcedError(BrokerError):
    """The service detached a link (an entity-level outage); the SDK treats it as a connection error."""

    condition = "amqp:link:detach-forced"
    http_status = 503
    retryable = True


class DecodeError(BrokerError):
    """A transfer is not a valid AMQP message."""

    condition = "amqp:decode-error"
    http_status = 400
    retryable = False
