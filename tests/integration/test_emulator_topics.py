"""Topics and subscriptions of the local Service Bus, through the public SDK: fan-out, rules, dead letters.

Rules are created with the administration client, as an application would; a subscription whose
``$Default`` rule (``1=1``) is deleted receives only what its own rules match.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleFilter,
)

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import admin_client, receive, receive_nothing, sb_client

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def admin(shared_namespace: LocalNamespace) -> Iterator[ServiceBusAdministrationClient]:
    with admin_client(shared_namespace) as client:
        yield client


@pytest.fixture
def client(shared_namespace: LocalNamespace) -> Iterator[ServiceBusClient]:
    with sb_client(shared_namespace) as sb:
        yield sb


def only_rule(
    admin: ServiceBusAdministrationClient,
    topic: str,
    sub: str,
    name: str,
    rule_filter: SqlRuleFilter | CorrelationRuleFilter,
) -> None:
    """Create a subscription that receives only what ``rule_filter`` matches."""
    admin.create_subscription(topic, sub)
    admin.create_rule(topic, sub, name, filter=rule_filter)
    admin.delete_rule(topic, sub, "$Default")


def bodies(client: ServiceBusClient, topic: str, sub: str, count: int) -> list[str]:
    """Receive and complete exactly ``count`` messages of a subscription; then it must be empty."""
    with client.get_subscription_receiver(topic, sub) as receiver:
        got = receive(receiver, count) if count else []
        for message in got:
            receiver.complete_message(message)
        receive_nothing(receiver, wait=0.3)
        return [str(m) for m in got]


def test_every_subscription_gets_its_own_copy(
    admin: ServiceBusAdministrationClient, client: ServiceBusClient, unique_name: str
) -> None:
    # Given a topic with three subscriptions (default rule: everything)
    admin.create_topic(unique_name)
    for sub in ("s1", "s2", "s3"):
        admin.create_subscription(unique_name, sub)
    # When two messages are sent to the topic
    with client.get_topic_sender(unique_name) as sender:
        sender.send_messages([ServiceBusMessage("m1", message_id="id-1"), ServiceBusMessage("m2")])
    # Then each subscription holds both, and settling in one leaves the others alone
    assert bodies(client, unique_name, "s1", 2) == ["m1", "m2"]
    with client.get_subscription_receiver(unique_name, "s2") as receiver:
        got = receive(receiver, 2)
        assert (str(got[0]), got[0].message_id) == ("m1", "id-1")
        receiver.dead_letter_message(got[0], reason="no", error_description="thanks")
        receiver.complete_message(got[1])
    assert bodies(client, unique_name, "s3", 2) == ["m1", "m2"]
    # And a subscription's dead-letter sub-queue holds what was dead-lettered there
    with client.get_subscription_receiver(unique_name, "s2", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        [dead] = receive(dlq, 1)
        assert (str(dead), dead.dead_letter_reason) == ("m1", "no")
        assert dead.dead_letter_error_description == "thanks"
        dlq.complete_message(dead)
    assert admin.get_subscription_runtime_properties(unique_name, "s2").dead_letter_message_count == 0


def test_correlation_filter(
    admin: ServiceBusAdministrationClient, client: ServiceBusClient, unique_name: str
) -> None:
    # Given subscriptions filtering on correlation id, on subject plus an application property, and all
    admin.create_topic(unique_name)
    only_rule(admin, unique_name, "by-corr", "corr", CorrelationRuleFilter(correlation_id="order-7"))
    only_rule(
        admin,
        unique_name,
        "by-props",
        "props",
        CorrelationRuleFilter(label="invoice", properties={"region": "eu"}),
    )
    admin.create_subscription(unique_name, "all")
    # When messages with various properties are sent
    with client.get_topic_sender(unique_name) as sender:
        sender.send_messages(
            [
                ServiceBusMessage("corr-match", correlation_id="order-7"),
                ServiceBusMessage("corr-other", correlation_id="order-8"),
                ServiceBusMessage("props-match", subject="invoice", application_properties={"region": "eu"}),
                ServiceBusMessage("props-us", subject="invoice", application_properties={"region": "us"}),
                ServiceBusMessage("props-no-subject", application_properties={"region": "eu"}),
            ]
        )
    # Then each filtered subscription gets exactly its matches, and the unfiltered one gets all five
    assert bodies(client, unique_name, "by-corr", 1) == ["corr-match"]
    assert bodies(client, unique_name, "by-props", 1) == ["props-match"]
    assert len(bodies(client, unique_name, "all", 5)) == 5


def test_sql_filters(
    admin: ServiceBusAdministrationClient, client: ServiceBusClient, unique_name: str
) -> None:
    # Given one subscription with an explicit `1=1` rule and one with a property-equality rule
    admin.create_topic(unique_name)
    only_rule(admin, unique_name, "everything", "true", SqlRuleFilter("1=1"))
    only_rule(admin, unique_name, "red", "red", SqlRuleFilter("color = 'red' AND size = 3"))
    only_rule(admin, unique_name, "labelled", "label", SqlRuleFilter("sys.Label = 'hot'"))
    # When messages of several colours and sizes are sent
    with client.get_topic_sender(unique_name) as sender:
        sender.send_messages(
            [
                ServiceBusMessage("red-3", application_properties={"color": "red", "size": 3}),
                ServiceBusMessage("red-4", application_properties={"color": "red", "size": 4}),
                ServiceBusMessage("blue-3", application_properties={"color": "blue", "size": 3}),
                ServiceBusMessage("hot", subject="hot"),
            ]
        )
    # Then `1=1` matches all, the equality rule only red size 3, the system-property rule only "hot"
    assert bodies(client, unique_name, "everything", 4) == ["red-3", "red-4", "blue-3", "hot"]
    assert bodies(client, unique_name, "red", 1) == ["red-3"]
    assert bodies(client, unique_name, "labelled", 1) == ["hot"]


def test_a_message_matching_several_rules_is_delivered_once(
    admin: ServiceBusAdministrationClient, client: ServiceBusClient, unique_name: str
) -> None:
    admin.create_topic(unique_name)
    only_rule(admin, unique_name, "sub", "red", SqlRuleFilter("color = 'red'"))
    admin.create_rule(unique_name, "sub", "big", filter=SqlRuleFilter("size = 3"))
    with client.get_topic_sender(unique_name) as sender:
        sender.send_messages(ServiceBusMessage("both", application_properties={"color": "red", "size": 3}))
    assert bodies(client, unique_name, "sub", 1) == ["both"]


def test_subscription_without_rules_receives_nothing(
    admin: ServiceBusAdministrationClient, client: ServiceBusClient, unique_name: str
) -> None:
    admin.create_topic(unique_name)
    admin.create_subscription(unique_name, "none")
    admin.delete_rule(unique_name, "none", "$Default")
    with client.get_topic_sender(unique_name) as sender:
        sender.send_messages(ServiceBusMessage("dropped"))
    assert bodies(client, unique_name, "none", 0) == []
