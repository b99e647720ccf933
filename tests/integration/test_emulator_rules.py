"""Subscription rules the way the SDK's rule samples use them: SQL filters with parameters, SQL rule actions,
and rule create/get/list/update/delete through ``ServiceBusAdministrationClient``.
"""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.servicebus import ServiceBusMessage
from azure.servicebus.management import (
    CorrelationRuleFilter,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import admin_client, receive, receive_nothing, sb_client

pytestmark = pytest.mark.timeout(90)


def colour(message: object) -> str:
    value = message.application_properties[b"Color"]  # type: ignore[attr-defined]
    return value.decode() if isinstance(value, bytes) else str(value)


def test_rule_management_with_parameters_round_trips(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    topic, sub = unique_name, "s"
    parametrized = SqlRuleFilter(
        "property1 = @param1 AND property2 = @param2", parameters={"@param1": "value", "@param2": 1}
    )
    with admin_client(shared_namespace) as admin:
        admin.create_topic(topic)
        admin.create_subscription(topic, sub)
        # When rules are created as the SDK's rule-management sample does
        admin.create_rule(topic, sub, "plain")
        admin.create_rule(topic, sub, "sql", filter=parametrized)
        # Then they list, and the parameters read back with their types
        assert sorted(r.name for r in admin.list_rules(topic, sub)) == ["$Default", "plain", "sql"]
        got = admin.get_rule(topic, sub, "sql")
        assert isinstance(got.filter, SqlRuleFilter)
        assert got.filter.parameters == {"@param1": "value", "@param2": 1}
        # And update by model and by keyword both apply
        rule = admin.get_rule(topic, sub, "plain")
        rule.filter = SqlRuleFilter(
            "property1 = @param1 AND property2 = @param2", parameters={"@param1": "value2", "@param2": 2}
        )
        admin.update_rule(topic, sub, rule)
        assert admin.get_rule(topic, sub, "plain").filter.parameters == {"@param1": "value2", "@param2": 2}
        # (as in the sample: the SDK sends the keyword filter's expression with parameters of the same names)
        admin.update_rule(
            topic,
            sub,
            admin.get_rule(topic, sub, "plain"),
            filter=SqlRuleFilter(
                "property2 = @param2 AND property1 = @param1", parameters={"@param1": "value3", "@param2": 3}
            ),
        )
        updated = admin.get_rule(topic, sub, "plain").filter
        assert updated.sql_expression == "property2 = @param2 AND property1 = @param1"
        assert set(updated.parameters) == {"@param1", "@param2"}
        # And delete removes them
        admin.delete_rule(topic, sub, "plain")
        admin.delete_rule(topic, sub, "sql")
        with pytest.raises(ResourceNotFoundError):
            admin.get_rule(topic, sub, "sql")
        assert [r.name for r in admin.list_rules(topic, sub)] == ["$Default"]


def test_filter_routing_with_an_action_as_in_the_sdk_sample(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    topic = unique_name
    rules = {
        "all": ("$Default", TrueRuleFilter(), None),
        "red": ("RedSqlRule", SqlRuleFilter("Color = 'Red'"), None),
        "blue": (
            "BlueSqlRule",
            SqlRuleFilter("Color = 'Blue'"),
            SqlRuleAction("SET Color = 'BlueProcessed'"),
        ),
        "corr": (
            "ImportantCorrelationRule",
            CorrelationRuleFilter(correlation_id="important", label="Red"),
            None,
        ),
    }
    with admin_client(shared_namespace) as admin:
        admin.create_topic(topic)
        for sub, (name, rule_filter, action) in rules.items():
            admin.create_subscription(topic, sub)
            admin.delete_rule(topic, sub, "$Default")
            admin.create_rule(topic, sub, name, filter=rule_filter, action=action)
        action = admin.get_rule(topic, "blue", "BlueSqlRule").action
        assert isinstance(action, SqlRuleAction)
        assert action.sql_expression == "SET Color = 'BlueProcessed'"
    with sb_client(shared_namespace) as client:
        with client.get_topic_sender(topic) as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(
                        "m", application_properties={"Color": c}, subject=c, correlation_id=corr
                    )
                    for c in ("Red", "Blue", "Green")
                    for corr in (None, "important", "notimportant")
                ]
            )
        expected = {"all": 9, "red": 3, "blue": 3, "corr": 1}
        for sub, count in expected.items():
            with client.get_subscription_receiver(topic, sub) as receiver:
                got = receive(receiver, count)
                receive_nothing(receiver, wait=0.5)
                if sub == "blue":
                    # Then the action rewrote the copy of the subscription that has it ...
                    assert {colour(m) for m in got} == {"BlueProcessed"}
                if sub == "all":
                    # ... and no other
                    assert sorted(colour(m) for m in got) == ["Blue"] * 3 + ["Green"] * 3 + ["Red"] * 3


def test_parameters_in_filters_and_actions_route_and_rewrite(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    topic = unique_name
    with admin_client(shared_namespace) as admin:
        admin.create_topic(topic)
        admin.create_subscription(topic, "s")
        admin.delete_rule(topic, "s", "$Default")
        admin.create_rule(
            topic,
            "s",
            "routed",
            filter=SqlRuleFilter(
                "region = @region AND size > @min", parameters={"@region": "eu", "@min": 10}
            ),
            action=SqlRuleAction(
                "SET tier = @tier; SET total = size * 2 + 1; SET label = region + '-' + @tier; REMOVE secret",
                parameters={"@tier": "gold"},
            ),
        )
    with sb_client(shared_namespace) as client:
        with client.get_topic_sender(topic) as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(
                        "in", application_properties={"region": "eu", "size": 11, "secret": "x"}
                    ),
                    ServiceBusMessage("small", application_properties={"region": "eu", "size": 10}),
                    ServiceBusMessage("us", application_properties={"region": "us", "size": 99}),
                ]
            )
        with client.get_subscription_receiver(topic, "s") as receiver:
            [message] = receive(receiver, 1)
            receive_nothing(receiver, wait=0.5)
    assert str(message) == "in"
    assert message.application_properties == {
        b"region": b"eu",
        b"size": 11,
        b"tier": b"gold",
        b"total": 23,
        b"label": b"eu-gold",
    }


@pytest.mark.parametrize(
    ("rule_filter", "action"),
    [
        (SqlRuleFilter("a = @missing", parameters={"@other": 1}), None),
        (SqlRuleFilter("1=1"), SqlRuleAction("SET sys.Label = 'x'")),
        (SqlRuleFilter("1=1"), SqlRuleAction("UPDATE x")),
    ],
)
def test_what_the_subset_lacks_is_refused_and_changes_nothing(
    shared_namespace: LocalNamespace,
    unique_name: str,
    rule_filter: SqlRuleFilter,
    action: SqlRuleAction | None,
) -> None:
    with admin_client(shared_namespace) as admin:
        admin.create_topic(unique_name)
        admin.create_subscription(unique_name, "s")
        with pytest.raises(HttpResponseError):
            admin.create_rule(unique_name, "s", "bad", filter=rule_filter, action=action)
        assert [r.name for r in admin.list_rules(unique_name, "s")] == ["$Default"]
