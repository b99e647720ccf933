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
    """The entity is not in the bridge's settings (``only_configured_entities``); no namespace was asked."""


class AuthenticationError(BridgeError):
    """A caller presented no credentials or wrong ones."""


class BackpressureError(BridgeError):
    """The outbox is at its configured bound; try again after ``retry_after`` seconds."""

    retryable = True

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StateStoreUnavailableError(BridgeError):
    """Redis (the bridge's state store) is unreachable, read-only or refused a command.

    Raised by every Redis adapter (``bridge.redis.errors``) for reads and writes of shared state: roles,
    leases, retry times, status. The outbox's write path raises the more specific
    ``OutboxUnavailableError``, so a caller that only cares that Redis failed catches this class.
    """

    retryable = True


class OutboxUnavailableError(StateStoreUnavailableError):
    """Redis did not accept the write (down, read-only, or WAIT not satisfied); nothing was acknowledged."""


class OutboxLayoutChangedError(OutboxUnavailableError):
    """The entity's shard count in Redis differs from the writer's; nothing was written (it retries)."""

    def __init__(self, message: str, shards: int) -> None:
        super().__init__(message)
        self.shards = shards


class LeaseLostError(BridgeError):
    """The lease a write was fenced with is held by someone else (or expired); nothing was written.

    A drainer that gets it stops working on the shard: the new holder claims and resends what was pending.
    """


class InvariantError(BridgeError):
    """An internal invariant did not hold (a bug, not a fault of Redis or Service Bus); nothing was acked."""


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
    """The local Service Bus failed or refused something; the root of ``bridge.emulator.errors``."""
