"""End-to-end failover with both namespaces on Microsoft Entra ID only (``LocalStack(entra=True)``).

The stack is what ``bridge up --entra`` runs: both namespaces refuse SAS, every bridge process signs in as
the ``bridge`` managed identity through the primary's issuer, and the test reads the namespaces with the
same kind of client (``bridge.servicebus.credentials``), never with a key.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiveMode

from bridge.core.paired import PING_CONTENT_TYPE
from bridge.embedded.stack import LocalStack, wait_until
from bridge.servicebus.credentials import service_bus_client
from bridge.servicebus.provisioning import provision
from bridge.settings import NamespaceSettings, Settings
from bridge.status.snapshot import BacklogProbe
from tests.integration.entra_support import client_id
from tests.integration.paired_support import PAIRED_SETTINGS, cost, paired_state
from tests.integration.worker_support import entity_status, make_stack, producer

__all__ = ["make_stack"]
pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def entra_stack(make_stack: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``entra_stack(entities, settings)``: a started Entra-only stack; the test process signs in as the
    stack's managed identity too."""

    def make(entities: dict[str, Any], settings: dict[str, str] | None = None) -> LocalStack:
        stack: LocalStack = make_stack(entities, settings=settings, entra=True)
        env = stack.env()
        for name in ("IDENTITY_ENDPOINT", "IDENTITY_HEADER", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
            monkeypatch.setenv(name, env[name])
        assert not any(k.endswith("__CONNECTION_STRING") for k in env)
        return stack

    yield make


def namespace(stack: LocalStack, role: str) -> NamespaceSettings:
    """The namespace settings every bridge process of ``stack`` sees for ``role``."""
    prefix = f"BRIDGE_{role.upper()}__"
    fields = {k.removeprefix(prefix).lower(): v for k, v in stack.env().items() if k.startswith(prefix)}
    return NamespaceSettings.model_validate(fields)


def settings(stack: LocalStack) -> Settings:
    return Settings(
        primary=namespace(stack, "primary"),
        secondary=namespace(stack, "secondary"),
        paired={"backlog_queue_count": int(stack.env().get("BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT", "2"))},
    )


def receive(stack: LocalStack, role: str, entity: str, expected: int, timeout: float = 40.0) -> list[Any]:
    """Receive-and-delete ``expected`` messages from ``entity`` of ``role`` with an Entra ID client."""
    got: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + timeout
    with (
        service_bus_client(namespace(stack, role), retry_total=1) as client,
        client.get_queue_receiver(entity, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver,
    ):
        while len(got) < expected and time.monotonic() < deadline:
            got.extend(receiver.receive_messages(max_message_count=100, max_wait_time=1))
        got.extend(receiver.receive_messages(max_message_count=100, max_wait_time=0.5))
    return got


def ids(messages: list[Any]) -> list[str]:
    return sorted(str(m.message_id) for m in messages if m.content_type != PING_CONTENT_TYPE)


def test_passive_failover_with_entra_id_only(entra_stack: Any) -> None:
    stack = entra_stack({"orders": {"replication": "passive"}})
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        # Given a healthy primary reached with the managed identity
        first = [p.send("orders", f"a{i}".encode()) for i in range(10)]
        assert ids(receive(stack, "primary", "orders", 10)) == sorted(first)
        # When the primary goes down, Then every later message lands in the secondary and the roles swap
        stack.primary.control.outage()
        second = [p.send("orders", f"b{i}".encode()) for i in range(10)]
        assert ids(receive(stack, "secondary", "orders", 10)) == sorted(second)
    assert entity_status(stack, "orders")["active"] == "secondary"


def test_paired_failover_and_syphon_with_entra_id_only(entra_stack: Any) -> None:
    stack = entra_stack(
        {"orders": {"replication": "paired"}}, {**PAIRED_SETTINGS, "BRIDGE_PAIRED__FAILOVER_INTERVAL": "1"}
    )
    # bridge provision creates the backlog queues through the administration client, as Data Owner
    report = provision(settings(stack))
    assert [row.action for row in report.rows] == ["created", "created"]
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        # Given a primary outage long enough for failover: messages go to the secondary's backlog queues
        stack.primary.control.outage()
        backlogged = [p.send("orders", f"down-{i}".encode()) for i in range(10)]
        wait_until(lambda: paired_state(stack, "orders").failed_over, 40, what="failover engaged")
        wait_until(lambda: cost(stack, "orders").backlog_sends >= 10, 40, what="backlog sends")
        # The status page's backlog depths are read with the same credential (administration client)
        depths = BacklogProbe(settings(stack), ttl=0).depths()
        assert all(d.error is None for d in depths.values()), depths
        assert sum(d.messages or 0 for d in depths.values()) == 10
        # When the primary comes back, the ping restores it and the syphon moves the backlog home
        stack.primary.control.restore()
        wait_until(lambda: not paired_state(stack, "orders").failed_over, 60, what="ping restoring orders")
        fresh = [p.send("orders", f"up-{i}".encode()) for i in range(5)]
    assert ids(receive(stack, "primary", "orders", 15, timeout=60)) == sorted(backlogged + fresh)
    assert cost(stack, "orders").syphon_sends == 10


def test_a_primary_whose_token_cannot_be_obtained_is_failed_over_and_loses_nothing(entra_stack: Any) -> None:
    stack = entra_stack({"orders": {"replication": "passive"}, "held": {"replication": "none"}})
    endpoints = stack.primary.endpoints
    assert endpoints is not None
    # Given bridge processes whose primary signs in with a client secret the issuer refuses
    wrong = {
        "BRIDGE_PRIMARY__CREDENTIAL": "client_secret",
        "BRIDGE_PRIMARY__CLIENT_ID": client_id("sender"),
        "BRIDGE_PRIMARY__CLIENT_SECRET": "wrong-secret-value",
        "BRIDGE_PRIMARY__TENANT_ID": endpoints.tenant_id,
        "BRIDGE_PRIMARY__AUTHORITY": endpoints.authority,
    }
    worker = stack.start_worker("wrong-secret", **wrong)
    stack.start_beat(**wrong)
    with producer(stack) as p:
        passive = [p.send("orders", f"p{i}".encode()) for i in range(10)]
        held = [p.send("held", f"h{i}".encode()) for i in range(5)]
    # Then the primary counts as unavailable: the passive entity's messages land in the secondary ...
    assert ids(receive(stack, "secondary", "orders", 10)) == sorted(passive)
    status = entity_status(stack, "orders")
    assert status["active"] == "secondary" and status["namespaces"]["primary"]["available"] is False
    # ... and those of an entity with nowhere else to go stay in the outbox, none acknowledged
    wait_until(
        lambda: entity_status(stack, "held")["namespaces"]["primary"]["last_error"], 40, what="held tried"
    )
    assert entity_status(stack, "held")["outbox_depth"] == 5
    assert "wrong-secret-value" not in worker.log_path.read_text(errors="replace")
    # When a worker that signs in right takes over, they are delivered, each once
    worker.kill()
    stack.start_worker("signed-in")
    assert ids(receive(stack, "primary", "held", 5)) == sorted(held)
    wait_until(lambda: entity_status(stack, "held")["outbox_depth"] == 0, 20, what="empty outbox")
