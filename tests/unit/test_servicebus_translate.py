"""SDK exceptions → the bridge's NamespaceError classes, with real SDK exception instances."""

from __future__ import annotations

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessageSizeExceededError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
)

from bridge.core.error_classes import ErrorClass, classify
from bridge.errors import (
    AttemptDeadlineExceeded,
    MessagePermanentError,
    NamespaceConfigurationError,
    NamespaceEntityNotFoundError,
    NamespaceError,
    NamespaceOutageError,
    NamespaceRefusedError,
    NamespaceTimeoutError,
    TransientNamespaceError,
)
from bridge.servicebus.translate import classify_sdk_type, translate, translated

TABLE: list[tuple[BaseException, type[NamespaceError]]] = [
    (ServiceBusConnectionError(message="socket closed"), NamespaceOutageError),
    (ServiceBusCommunicationError(message="unreachable"), NamespaceOutageError),
    (MessagingEntityDisabledError(message="disabled"), NamespaceOutageError),
    (ServiceBusQuotaExceededError(message="full"), NamespaceOutageError),
    (ServiceRequestError("connection refused"), NamespaceOutageError),
    (ConnectionRefusedError(111, "refused"), NamespaceRefusedError),
    (ServiceBusServerBusyError(message="busy"), TransientNamespaceError),
    (MessageLockLostError(message="lock lost"), TransientNamespaceError),
    (ServiceBusError("generic"), TransientNamespaceError),
    (HttpResponseError("500"), TransientNamespaceError),
    (RuntimeError("unforeseen"), TransientNamespaceError),
    (OperationTimeoutError(message="Send operation timed out"), NamespaceTimeoutError),
    (MessageSizeExceededError(message="too big"), MessagePermanentError),
    (ServiceBusAuthenticationError(message="bad token"), NamespaceConfigurationError),
    (ServiceBusAuthorizationError(message="no claim"), NamespaceConfigurationError),
    (ClientAuthenticationError("401"), NamespaceConfigurationError),
    (ResourceExistsError("409"), NamespaceConfigurationError),
    (MessagingEntityNotFoundError(message="no such queue"), NamespaceEntityNotFoundError),
    (ResourceNotFoundError("404"), NamespaceEntityNotFoundError),
]


@pytest.mark.parametrize(("exc", "expected"), TABLE, ids=[type(e).__name__ for e, _ in TABLE])
def test_translation_table(exc: BaseException, expected: type[NamespaceError]) -> None:
    error = translate(exc, "primary", "send to orders")
    assert type(error) is expected
    assert error.namespace == "primary"
    assert str(error).startswith(f"primary send to orders: {type(exc).__name__}")
    # The class a caller derives from the bridge error is the class the adapter gave the SDK error.
    assert classify(error).error_class is classify_sdk_type(type(exc)).error_class


def test_timeouts_and_missing_entities_keep_their_flags() -> None:
    assert classify(translate(OperationTimeoutError(message="t"))).timeout
    assert classify(translate(MessagingEntityNotFoundError(message="x"))).entity_missing
    assert not classify(translate(ServiceBusServerBusyError(message="b"))).timeout


def test_a_refused_connection_is_an_outage_of_the_whole_address() -> None:
    """The SDK keeps the socket's ``ConnectionRefusedError`` (as its inner error, or chained): the address
    refused, so the namespace is down as a whole (paired mode readmits its backlog queues once it accepts)."""
    socket_error = ConnectionRefusedError(111, "Connection refused")
    wrapped = ServiceBusConnectionError(message="Failed to initiate the connection", error=socket_error)
    error = translate(wrapped, "secondary", "batch")
    assert isinstance(error, NamespaceRefusedError)
    assert classify(error).address_refused
    assert classify(error).error_class is ErrorClass.OUTAGE
    try:
        try:
            raise socket_error
        except ConnectionRefusedError:
            raise ServiceBusConnectionError(message="Failed to initiate the connection") from None
    except ServiceBusConnectionError as chained:
        assert isinstance(translate(chained), NamespaceRefusedError)  # found through __context__
    assert not classify(translate(ServiceBusConnectionError(message="connection closed"))).address_refused


def test_bridge_errors_pass_through() -> None:
    deadline = AttemptDeadlineExceeded("no answer", namespace=None)
    assert translate(deadline, "secondary") is deadline and deadline.namespace == "secondary"


def test_secrets_are_scrubbed() -> None:
    exc = ServiceBusAuthenticationError(
        message="token SharedAccessSignature sr=sb%3A%2F%2Fns&sig=c2VjcmV0&se=1&skn=root rejected; "
        "Endpoint=sb://ns/;SharedAccessKeyName=root;SharedAccessKey=c2VjcmV0LWtleQ=="
    )
    text = str(translate(exc, "primary"))
    assert "c2VjcmV0" not in text and "c2VjcmV0LWtleQ" not in text
    assert "***" in text


def test_translated_raises_without_a_chain() -> None:
    def fails() -> None:
        raise ServiceBusConnectionError(message="gone")

    with pytest.raises(NamespaceOutageError) as caught:
        translated(fails, "primary", "send")
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert translated(lambda: 42) == 42
