"""Rule management over AMQP: ``add-rule``, ``remove-rule`` and ``enumerate-rules`` on a subscription's
``$management`` node, the way the .NET SDK's ``ServiceBusRuleManager``, the Java SDK and older Python
clients manage rules (``docs/local-servicebus.md``).

Two real clients drive it: the azure-servicebus SDK's own request/response path (a subscription
receiver's ``_mgmt_request_response``, which encodes the request maps with its pyamqp codec and checks the
answer's status), and python-qpid-proton, which keeps the described types of the ``enumerate-rules``
answer so the descriptor codes the .NET and Java clients decode can be checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiver
from azure.servicebus.exceptions import MessagingEntityAlreadyExistsError, ServiceBusError
from azure.servicebus.management import CorrelationRuleFilter, SqlRuleFilter
from proton import Described

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.entra_support import entra_admin, entra_client, entra_namespace, secret_credential
from tests.integration.proton_requests import proton_requests
from tests.integration.sdk_conformance import admin_client, receive, receive_nothing, sb_client

pytestmark = pytest.mark.timeout(90)

RULE_DESCRIPTION, EMPTY_ACTION, SQL_ACTION = 0x13700000004, 0x13700000005, 0x13700000006
SQL_FILTER, TRUE_FILTER, CORRELATION_FILTER = 0x1370000006, 0x1370000007, 0x1370000009


def _plain(value: Any) -> Any:
    """pyamqp decodes AMQP strings as bytes; compare as text."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _request(receiver: ServiceBusReceiver, operation: str, body: dict[str, Any]) -> tuple[int, Any]:
    """One request through the SDK's management link; returns (status, decoded body)."""

    def answer(status: int, message: Any, description: Any, amqp_transport: Any) -> tuple[int, Any]:
        return status, _plain(message.value)

    result: Any = receiver._mgmt_request_response(operation.encode(), body, answer)
    return cast(tuple[int, Any], result)


def _checked(receiver: ServiceBusReceiver, operation: str, body: dict[str, Any]) -> None:
    """A request whose failure raises the exception the SDK raises for that answer."""
    from azure.servicebus._common import mgmt_handlers

    receiver._mgmt_request_response(operation.encode(), body, mgmt_handlers.default)


def _names(receiver: ServiceBusReceiver) -> list[str]:
    status, body = _request(receiver, "com.microsoft:enumerate-rules", {"top": 100, "skip": 0})
    assert status == 200
    return [entry["rule-description"][2] for entry in body["rules"]]


def test_rules_added_over_amqp_route_messages_and_show_over_http(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    topic, sub = unique_name, "s"
    with admin_client(shared_namespace) as admin, sb_client(shared_namespace) as client:
        admin.create_topic(topic)
        admin.create_subscription(topic, sub)
        with client.get_subscription_receiver(topic, sub, max_wait_time=2) as receiver:
            # When a client adds a SQL rule with an action and a correlation rule, and removes $Default
            red = {
                "sql-filter": {"expression": "Color = 'Red'"},
                "sql-rule-action": {"expression": "SET Seen = 'red'"},
            }
            blue = {"correlation-filter": {"label": "blue", "properties": {"Region": "eu"}}}
            added = _request(
                receiver, "com.microsoft:add-rule", {"rule-name": "red", "rule-description": red}
            )
            assert added == (200, {})
            assert _request(
                receiver, "com.microsoft:add-rule", {"rule-name": "blue", "rule-description": blue}
            ) == (200, {})
            assert _request(receiver, "com.microsoft:remove-rule", {"rule-name": "$Default"}) == (200, {})
            # Then enumerate-rules lists them (sorted by name) with their filters and actions
            assert _names(receiver) == ["blue", "red"]
            status, body = _request(receiver, "com.microsoft:enumerate-rules", {"top": 1, "skip": 1})
            assert status == 200
            [entry] = body["rules"]
            flt, action, name, _created = entry["rule-description"]
            assert (flt, action, name) == (["Color = 'Red'", 20], ["SET Seen = 'red'", 20], "red")
            # (past the last rule: No Content, as Service Bus answers)
            assert _request(receiver, "com.microsoft:enumerate-rules", {"top": 10, "skip": 2})[0] == 204
            # And the HTTP management endpoint sees the same rules
            rules = {r.name: r for r in admin.list_rules(topic, sub)}
            assert set(rules) == {"blue", "red"}
            assert isinstance(rules["red"].filter, SqlRuleFilter)
            assert rules["red"].action is not None
            assert isinstance(rules["blue"].filter, CorrelationRuleFilter)
            assert rules["blue"].filter.properties == {"Region": "eu"}
            # And messages are routed by them
            with client.get_topic_sender(topic) as sender:
                sender.send_messages(
                    [
                        ServiceBusMessage("r", application_properties={"Color": "Red"}),
                        ServiceBusMessage("g", application_properties={"Color": "Green"}),
                        ServiceBusMessage("b", subject="blue", application_properties={"Region": "eu"}),
                    ]
                )
            got = receive(receiver, 2)
            assert sorted(str(m) for m in got) == ["b", "r"]
            red_copy = next(m for m in got if str(m) == "r")
            assert red_copy.application_properties[b"Seen"] == b"red"  # type: ignore[index]
            for message in got:
                receiver.complete_message(message)
            receive_nothing(receiver)


def test_rule_requests_are_refused_as_service_bus_refuses_them(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    topic, sub = unique_name, "s"
    with admin_client(shared_namespace) as admin, sb_client(shared_namespace) as client:
        admin.create_topic(topic)
        admin.create_subscription(topic, sub)
        admin.create_queue(f"{topic}-q")
        with client.get_subscription_receiver(topic, sub) as receiver:
            add = {"rule-name": "$Default", "rule-description": {"sql-filter": {"expression": "1=1"}}}
            # A rule that exists: 409, which the SDK raises as MessagingEntityAlreadyExistsError
            assert _request(receiver, "com.microsoft:add-rule", add)[0] == 409
            with pytest.raises(MessagingEntityAlreadyExistsError):
                _checked(receiver, "com.microsoft:add-rule", add)
            # A rule that does not exist: 404
            assert _request(receiver, "com.microsoft:remove-rule", {"rule-name": "nope"})[0] == 404
            # Neither or both filters, an unparseable expression: 400
            for description in (
                {},
                {"sql-filter": {"expression": "1=1"}, "correlation-filter": {"label": "x"}},
                {"sql-filter": {"expression": "Color = = 'Red'"}},
            ):
                body = {"rule-name": "bad", "rule-description": description}
                assert _request(receiver, "com.microsoft:add-rule", body)[0] == 400, description
            with pytest.raises(ServiceBusError):
                _checked(receiver, "com.microsoft:add-rule", {"rule-name": "bad", "rule-description": {}})
            assert _names(receiver) == ["$Default"]
        # Rules exist on subscriptions only
        with client.get_queue_receiver(f"{topic}-q") as queue_receiver:
            status, _ = _request(queue_receiver, "com.microsoft:enumerate-rules", {"top": 10, "skip": 0})
            assert status == 400


def test_enumerate_rules_answers_the_described_types_the_dotnet_and_java_clients_decode(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    topic, sub = unique_name, "s"
    with admin_client(shared_namespace) as admin:
        admin.create_topic(topic)
        admin.create_subscription(topic, sub)
    with proton_requests(shared_namespace, f"{topic}/Subscriptions/{sub}") as request:
        # When rules are added by a client that is not the Python SDK
        correlation = {"correlation-id": "c1", "content-type": "text/plain", "properties": {"n": 7}}
        for name, description in (
            ("corr", {"correlation-filter": correlation}),
            ("sql", {"sql-filter": {"expression": "n > 5"}, "sql-rule-action": {"expression": "SET m = 1"}}),
        ):
            answer = request("com.microsoft:add-rule", {"rule-name": name, "rule-description": description})
            assert answer.properties["statusCode"] == 200, answer.properties
        answer = request("com.microsoft:enumerate-rules", {"top": 10, "skip": 0})
    # Then each rule is a described rule-description list [filter, action, name, created-at]
    assert answer.properties["statusCode"] == 200
    rules = [entry["rule-description"] for entry in answer.body["rules"]]
    assert all(isinstance(r, Described) and r.descriptor == RULE_DESCRIPTION for r in rules)
    by_name = {r.value[2]: r.value for r in rules}
    assert list(by_name) == ["$Default", "corr", "sql"]
    default_filter, default_action = by_name["$Default"][:2]
    assert (default_filter.descriptor, default_action.descriptor) == (TRUE_FILTER, EMPTY_ACTION)
    corr_filter = by_name["corr"][0]
    assert corr_filter.descriptor == CORRELATION_FILTER
    assert corr_filter.value == ["c1", None, None, None, None, None, None, "text/plain", {"n": 7}]
    sql_filter, sql_action = by_name["sql"][:2]
    assert (sql_filter.descriptor, sql_filter.value[0]) == (SQL_FILTER, "n > 5")
    assert (sql_action.descriptor, sql_action.value[0]) == (SQL_ACTION, "SET m = 1")


def test_rule_requests_need_listen_not_manage(tmp_path: Path) -> None:
    """As with the .NET and Java rule managers: a Data Receiver manages rules, a Data Sender cannot."""
    ns = entra_namespace(tmp_path)
    try:
        with entra_admin(ns, secret_credential(ns, "owner")) as admin:
            admin.create_topic("t")
            admin.create_subscription("t", "s")
        add = {"rule-name": "r", "rule-description": {"sql-filter": {"expression": "n > 1"}}}
        with (
            entra_client(ns, secret_credential(ns, "listener")) as client,
            client.get_subscription_receiver("t", "s") as receiver,
        ):
            assert _request(receiver, "com.microsoft:add-rule", add) == (200, {})
            assert _names(receiver) == ["$Default", "r"]
        with (
            pytest.raises(ServiceBusError, match="'Listen' claim"),
            entra_client(ns, secret_credential(ns, "sender")) as client,
            client.get_subscription_receiver("t", "s") as receiver,
        ):
            _request(receiver, "com.microsoft:remove-rule", {"rule-name": "r"})
    finally:
        ns.close()
