"""The local namespace's management endpoint through the public ``ServiceBusAdministrationClient``.

Everything goes over real TLS to a real ``bridge emulator`` process; messages for the runtime counts are
sent and settled with the public ``ServiceBusClient``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.core.exceptions import ClientAuthenticationError, ResourceExistsError, ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleFilter,
    TrueRuleFilter,
)

from bridge.embedded.namespaces import LocalNamespace

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNamespace]:
    """A namespace of this module's own: listing, paging and namespace properties see only its entities."""
    with LocalNamespace("primary", data_dir=tmp_path_factory.mktemp("admin-ns")) as ns:
        yield ns


@pytest.fixture
def admin(emulator: LocalNamespace) -> Iterator[ServiceBusAdministrationClient]:
    client = ServiceBusAdministrationClient.from_connection_string(
        emulator.connection_string, connection_verify=emulator.certificate, retry_total=0
    )
    with client:
        yield client


def unique(prefix: str, request: pytest.FixtureRequest) -> str:
    return f"{prefix}-{request.node.name[-40:].replace('[', '-').replace(']', '')}".lower()


def test_queue_lifecycle_with_every_description_field(
    admin: ServiceBusAdministrationClient, request: pytest.FixtureRequest
) -> None:
    name = unique("q", request)
    created = admin.create_queue(
        name,
        max_size_in_megabytes=2048,
        max_delivery_count=4,
        default_message_time_to_live=dt.timedelta(hours=2),
        auto_delete_on_idle=dt.timedelta(days=3),
        lock_duration=dt.timedelta(seconds=45),
        requires_session=True,
        requires_duplicate_detection=True,
        duplicate_detection_history_time_window=dt.timedelta(minutes=5),
        dead_lettering_on_message_expiration=True,
        enable_batched_operations=False,
        enable_partitioning=True,
    )
    assert created.name == name
    fetched = admin.get_queue(name)
    assert (fetched.max_size_in_megabytes, fetched.max_delivery_count) == (2048, 4)
    assert fetched.default_message_time_to_live == dt.timedelta(hours=2)
    assert fetched.auto_delete_on_idle == dt.timedelta(days=3)
    assert fetched.lock_duration == dt.timedelta(seconds=45)
    assert fetched.duplicate_detection_history_time_window == dt.timedelta(minutes=5)
    assert fetched.requires_session and fetched.requires_duplicate_detection
    assert fetched.dead_lettering_on_message_expiration
    assert not fetched.enable_batched_operations and fetched.enable_partitioning

    # When a field is changed with update_queue, the next read sees it and nothing else moved.
    fetched.max_delivery_count = 9
    fetched.lock_duration = dt.timedelta(seconds=20)
    admin.update_queue(fetched)
    updated = admin.get_queue(name)
    assert (updated.max_delivery_count, updated.lock_duration) == (9, dt.timedelta(seconds=20))
    assert updated.max_size_in_megabytes == 2048 and updated.requires_session

    assert name in [q.name for q in admin.list_queues()]
    admin.delete_queue(name)
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue(name)
    assert name not in [q.name for q in admin.list_queues()]


def test_defaults_match_azure(admin: ServiceBusAdministrationClient, request: pytest.FixtureRequest) -> None:
    queue = admin.create_queue(unique("qd", request))
    assert queue.lock_duration == dt.timedelta(minutes=1)
    assert queue.max_delivery_count == 10 and queue.max_size_in_megabytes == 1024
    assert queue.default_message_time_to_live > dt.timedelta(days=10_000_000)
    assert queue.status == "Active" and not queue.requires_session


def test_conflicts_and_missing_entities(
    admin: ServiceBusAdministrationClient, request: pytest.FixtureRequest
) -> None:
    name = unique("qc", request)
    admin.create_queue(name)
    with pytest.raises(ResourceExistsError):
        admin.create_queue(name)
    with pytest.raises(ResourceExistsError):
        admin.create_topic(name)
    with pytest.raises(ResourceNotFoundError):
        admin.get_topic("no-such-topic")
    missing = admin.get_queue(name)
    missing.name = "no-such-queue"
    with pytest.raises(ResourceNotFoundError):
        admin.update_queue(missing)
    with pytest.raises(ResourceNotFoundError):
        admin.delete_queue("no-such-queue")
    with pytest.raises(ResourceNotFoundError):
        admin.create_subscription("no-such-topic", "s1")


def test_topic_subscription_and_rules(
    admin: ServiceBusAdministrationClient, request: pytest.FixtureRequest
) -> None:
    topic = unique("t", request)
    admin.create_topic(
        topic,
        max_size_in_megabytes=3072,
        enable_partitioning=True,
        default_message_time_to_live=dt.timedelta(hours=1),
    )
    got = admin.get_topic(topic)
    assert (got.max_size_in_megabytes, got.enable_partitioning) == (3072, True)
    assert got.default_message_time_to_live == dt.timedelta(hours=1)

    sub = admin.create_subscription(
        topic,
        "s1",
        max_delivery_count=3,
        lock_duration=dt.timedelta(seconds=30),
        dead_lettering_on_message_expiration=True,
        requires_session=False,
    )
    assert (sub.max_delivery_count, sub.lock_duration) == (3, dt.timedelta(seconds=30))
    sub.max_delivery_count = 6
    admin.update_subscription(topic, sub)
    assert admin.get_subscription(topic, "s1").max_delivery_count == 6
    assert [s.name for s in admin.list_subscriptions(topic)] == ["s1"]

    # A new subscription has the $Default rule; rules can be added, read, updated and removed.
    assert [r.name for r in admin.list_rules(topic, "s1")] == ["$Default"]
    correlation = CorrelationRuleFilter(correlation_id="order-1", properties={"region": "eu", "n": 2})
    admin.create_rule(topic, "s1", "by-correlation", filter=correlation)
    admin.create_rule(topic, "s1", "by-sql", filter=SqlRuleFilter("region = 'us'"))
    rule = admin.get_rule(topic, "s1", "by-correlation")
    assert isinstance(rule.filter, CorrelationRuleFilter)
    assert rule.filter.correlation_id == "order-1"
    assert dict(rule.filter.properties) == {"region": "eu", "n": 2}
    sql = admin.get_rule(topic, "s1", "by-sql")
    assert isinstance(sql.filter, SqlRuleFilter) and sql.filter.sql_expression == "region = 'us'"
    sql.filter = SqlRuleFilter("region = 'ap'")
    admin.update_rule(topic, "s1", sql)
    assert admin.get_rule(topic, "s1", "by-sql").filter.sql_expression == "region = 'ap'"
    with pytest.raises(ResourceExistsError):
        admin.create_rule(topic, "s1", "by-sql", filter=TrueRuleFilter())
    admin.delete_rule(topic, "s1", "$Default")
    assert sorted(r.name for r in admin.list_rules(topic, "s1")) == ["by-correlation", "by-sql"]

    admin.delete_subscription(topic, "s1")
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription(topic, "s1")
    admin.delete_topic(topic)
    with pytest.raises(ResourceNotFoundError):
        admin.get_topic(topic)


def test_runtime_properties_after_real_sends(
    admin: ServiceBusAdministrationClient, emulator: LocalNamespace, request: pytest.FixtureRequest
) -> None:
    queue, topic = unique("qr", request), unique("tr", request)
    admin.create_queue(queue)
    admin.create_topic(topic)
    admin.create_subscription(topic, "all")
    with ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(4)])
            sender.schedule_messages(
                ServiceBusMessage("later"), dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
            )
        with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert len(received) == 1
            receiver.dead_letter_message(received[0], reason="test")
        with client.get_topic_sender(topic) as sender:
            sender.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])

    counts = admin.get_queue_runtime_properties(queue)
    assert counts.active_message_count == 3
    assert (counts.dead_letter_message_count, counts.scheduled_message_count) == (1, 1)
    assert counts.total_message_count == 5 and counts.size_in_bytes > 0
    assert counts.created_at_utc <= counts.updated_at_utc
    sub_counts = admin.get_subscription_runtime_properties(topic, "all")
    assert (sub_counts.active_message_count, sub_counts.dead_letter_message_count) == (2, 0)
    topic_counts = admin.get_topic_runtime_properties(topic)
    assert topic_counts.subscription_count == 1
    listed = {q.name: q.active_message_count for q in admin.list_queues_runtime_properties()}
    assert listed[queue] == 3


def test_listing_pages_through_next_links(
    admin: ServiceBusAdministrationClient, request: pytest.FixtureRequest
) -> None:
    prefix = unique("page", request)
    names = [f"{prefix}-{i}" for i in range(5)]
    for name in names:
        admin.create_topic(name)
    pages = admin.list_topics(max_page_size=2).by_page()
    seen = [[t.name for t in page] for page in pages]
    assert len(seen) >= 3 and all(len(page) <= 2 for page in seen)
    assert [n for page in seen for n in page if n.startswith(prefix)] == names


def test_namespace_properties(admin: ServiceBusAdministrationClient) -> None:
    props = admin.get_namespace_properties()
    assert props.name == "primary" and props.messaging_sku == "Standard"


def test_wrong_key_is_an_authentication_error(emulator: LocalNamespace) -> None:
    wrong = emulator.connection_string.replace(emulator.key, "not-the-key")
    with (
        ServiceBusAdministrationClient.from_connection_string(
            wrong, connection_verify=emulator.certificate, retry_total=0
        ) as client,
        pytest.raises(ClientAuthenticationError) as caught,
    ):
        client.list_queues().next()
    assert emulator.key not in str(caught.value)


def test_unknown_key_name_is_an_authentication_error(emulator: LocalNamespace) -> None:
    wrong = emulator.connection_string.replace(
        "SharedAccessKeyName=RootManageSharedAccessKey", "SharedAccessKeyName=Someone"
    )
    with (
        ServiceBusAdministrationClient.from_connection_string(
            wrong, connection_verify=emulator.certificate, retry_total=0
        ) as client,
        pytest.raises(ClientAuthenticationError),
    ):
        client.get_queue("anything")


def test_untrusted_certificate_is_refused(emulator: LocalNamespace, tmp_path: Path) -> None:
    from azure.core.exceptions import ServiceRequestError

    from bridge.emulator.certs import ensure_certificate

    other = ensure_certificate(tmp_path)
    with (
        ServiceBusAdministrationClient.from_connection_string(
            emulator.connection_string, connection_verify=str(other.cert), retry_total=0
        ) as client,
        pytest.raises(ServiceRequestError),
    ):
        client.get_queue("anything")
