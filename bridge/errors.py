"""The bridge's one exception tree.

Every error that leaves an adapter is one of these; driver exceptions (redis, azure, proton, pyspark) are
translated at the adapter edge with ``raise X(...) from None`` so callers never import a driver to catch
something. Each class says whether retrying the same operation can help (``retryable``); the send workers'
error *classes* (transient / outage / message-permanent / configuration) are decided in
``bridge.core`` from these types, never by string matching.

Messages never contain secrets: adapters build them from names and codes, not from connection strings.
"""

from __future__ import annotations


class BridgeError(Exception):
    """Base of every error the bridge raises on purpose."""

    retryable: bool = False


class ConfigurationError(BridgeError):
    """Settings are missing or invalid; start-up stops with a message naming the field."""


class InvalidMessageError(BridgeError):
    """A message broke a validation rule; nothing was stored.

    ``code`` is a stable machine-readable rule name (e.g. ``message_id_too_long``), ``field`` the envelope
    field at fault (``None`` when the message as a whole is at fault), ``index`` the position in a batch.
    """

    def __init__(self, code: str, message: str, field: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.index = index

    @property
    def detail(self) -> str:
        """The human-readable reason, without the code."""
        return str(self.args[0])


class MessageTooLargeError(InvalidMessageError):
    """A message body or encoded message exceeds the entity's size limit."""


class UnknownEntityError(BridgeError):
    """An entity is not configured (or not allowed for the caller)."""


class AuthenticationError(BridgeError):
    """A caller presented no credentials or wrong ones."""


class BackpressureError(BridgeError):
    """The outbox is at its configured bound; try again after ``retry_after`` seconds."""

    retryable = True

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OutboxUnavailableError(BridgeError):
    """Redis did not accept the write (down, read-only, or WAIT not satisfied); nothing was acknowledged."""

    retryable = True


class EntityNotAllowedError(AuthenticationError):
    """The caller's API key is valid but limited to other entities."""


class PartitionUnavailableError(BridgeError):
    """The outbox shard a partition key maps to is unavailable; other keys are unaffected."""

    retryable = True


class CorruptEntryError(BridgeError):
    """A stored outbox entry cannot be read back (unknown version, missing or malformed field)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NamespaceError(BridgeError):
    """A Service Bus namespace failed an operation; subclasses carry the failure class."""

    retryable = True

    def __init__(self, message: str, namespace: str | None = None) -> None:
        super().__init__(message)
        self.namespace = namespace


class TransientNamespaceError(NamespaceError):
    """A brief failure (server busy, a timeout under load); retry the same namespace."""


class NamespaceOutageError(NamespaceError):
    """The namespace is unreachable or failing as a whole; fail over."""


class AttemptDeadlineExceeded(NamespaceOutageError):
    """An attempt overran the bridge's hard deadline (e.g. a blackholed endpoint); the client is discarded."""


class NamespaceConfigurationError(NamespaceError):
    """Authentication failed or the entity does not exist; alert loudly and treat as unavailable."""


class MessagePermanentError(NamespaceError):
    """The namespace will never accept this message (e.g. too large); dead-letter it locally."""

    retryable = False


class NamespaceTimeoutError(TransientNamespaceError):
    """No answer within the SDK's timeout: transient, but it starts the paired failover timer."""


class NamespaceEntityNotFoundError(NamespaceConfigurationError):
    """The entity does not exist in the namespace (the syphon dead-letters messages bound for it)."""


class EmulatorError(BridgeError):
    """The local Service Bus could not start or answer its control interface."""


class BrokerError(EmulatorError):
    """The local Service Bus refuses an operation the way Azure does.

    ``condition`` is the AMQP error condition the SDK maps to its own exception class (see
    ``azure.servicebus._transport._pyamqp_transport._ERROR_CODE_TO_ERROR_MAPPING``); ``http_status`` is what
    the management endpoint answers.
    """

    condition: str = "amqp:internal-error"
    http_status: int = 500


class EntityNotFoundError(BrokerError):
    """The entity (queue, topic, subscription, rule) does not exist."""

    condition = "amqp:not-found"
    http_status = 404


class EntityAlreadyExistsError(BrokerError):
    """An entity with that path exists already."""

    condition = "com.microsoft:entity-already-exists"
    http_status = 409


class BrokerMessageSizeExceededError(BrokerError):
    """A message (or batch) exceeds the entity's maximum message size."""

    condition = "amqp:link:message-size-exceeded"
    http_status = 413


class BrokerQuotaExceededError(BrokerError):
    """The entity is at MaxSizeInMegabytes."""

    condition = "amqp:resource-limit-exceeded"
    http_status = 403


class BrokerInvalidOperationError(BrokerError):
    """The operation is not allowed in this state (e.g. no SessionId on a session entity)."""

    condition = "amqp:not-allowed"
    http_status = 400


class BrokerArgumentError(BrokerError):
    """An argument is malformed."""

    condition = "com.microsoft:argument-error"
    http_status = 400


class MessageLockLostBrokerError(BrokerError):
    """The lock token is unknown or its lock expired."""

    condition = "com.microsoft:message-lock-lost"
    http_status = 410


class SessionLockLostBrokerError(BrokerError):
    """The session lock expired or belongs to another receiver."""

    condition = "com.microsoft:session-lock-lost"
    http_status = 410


class SessionCannotBeLockedBrokerError(BrokerError):
    """The session is locked by another receiver, or no session is available."""

    condition = "com.microsoft:session-cannot-be-locked"
    http_status = 409


class MessageNotFoundBrokerError(BrokerError):
    """No message with that sequence number (deferred or scheduled) exists."""

    condition = "com.microsoft:message-not-found"
    http_status = 404


class ServerBusyBrokerError(BrokerError):
    """The namespace is throttling (fault control ``busy``)."""

    condition = "com.microsoft:server-busy"
    http_status = 503


class BrokerUnauthorizedError(BrokerError):
    """A SAS token is missing, expired, signed with a wrong key or scoped to another entity."""

    condition = "amqp:unauthorized-access"
    http_status = 401


class BrokerDetachForcedError(BrokerError):
    """The service detached a link (an entity-level outage); the SDK treats it as a connection error."""

    condition = "amqp:link:detach-forced"
    http_status = 503


class BrokerDecodeError(BrokerError):
    """A transfer is not a valid AMQP message."""

    condition = "amqp:decode-error"
    http_status = 400
