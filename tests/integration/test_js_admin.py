"""The management endpoint through Microsoft's JavaScript SDK: ``ServiceBusAdministrationClient`` 7.9.5.

One ``node`` process (``js/admin.js``) drives the administration client through queues, topics,
subscriptions and rules (create, get, update, exists, delete), runtime properties and paged listing, on a
namespace of this module's own, and prints what it saw; the tests below read it. It runs twice: signed in
with SAS (a connection string), and with Entra ID through the local issuer on a namespace that refuses SAS.
What the JavaScript client does differently from the Python one, and each test here guards:

- it signs every request's own URL, query included (``https://h/q1?api-version=2021-05``), not the
  namespace;
- it refuses a queue or topic description without ``<EnableExpress>``;
- ``createSubscription`` can name the subscription's first rule (``defaultRuleOptions``);
- it reads each entity's name from the entry's ``id`` URL.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.entra_support import (
    SECRETS,
    client_id,
    entra_admin,
    entra_client,
    entra_namespace,
    secret_credential,
)
from tests.integration.js_sdk_support import SCRIPTS, run_js, service_bus_sdk
from tests.integration.sdk_conformance import admin_client, receive, receive_nothing, sb_client

pytestmark = pytest.mark.timeout(180)


@dataclass
class Target:
    """A namespace of this module's own and how the clients sign in to it: SAS, or Entra ID only."""

    ns: LocalNamespace
    auth: str

    def js_env(self) -> dict[str, str]:
        """``js/common.js``'s variables: a connection string, or the host and a client of the issuer."""
        if self.auth == "sas":
            return {
                "SB_CONNECTION_STRING": self.ns.connection_string,
                "NODE_EXTRA_CA_CERTS": self.ns.certificate,
            }
        endpoints = self.ns.endpoints
        assert endpoints is not None and endpoints.tenant_id and endpoints.authority
        return {
            "SB_FQDN": f"localhost:{self.ns.port}",
            "NODE_EXTRA_CA_CERTS": self.ns.certificate,
            "AZURE_TENANT_ID": endpoints.tenant_id,
            "AZURE_CLIENT_ID": client_id("owner"),
            "AZURE_CLIENT_SECRET": SECRETS["owner"],
            "AZURE_AUTHORITY_HOST": endpoints.authority,
        }

    @contextmanager
    def client(self) -> Iterator[ServiceBusClient]:
        """The Python SDK's client, signed in the same way."""
        if self.auth == "sas":
            with sb_client(self.ns) as client:
                yield client
        else:
            with entra_client(self.ns, secret_credential(self.ns, "owner")) as client:
                yield client

    @contextmanager
    def admin(self) -> Iterator[ServiceBusAdministrationClient]:
        """The Python SDK's administration client, signed in the same way."""
        if self.auth == "sas":
            with admin_client(self.ns) as admin:
                yield admin
        else:
            with entra_admin(self.ns, secret_credential(self.ns, "owner")) as admin:
                yield admin


@pytest.fixture(scope="module", params=["sas", "entra"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """SAS: a plain namespace. Entra: SAS refused, the administration client signs in as a Data Owner of the
    local issuer (``ClientSecretCredential``, a bearer token for ``https://servicebus.azure.net``)."""
    folder = tmp_path_factory.mktemp(f"js-admin-{request.param}")
    if request.param == "sas":
        ns = LocalNamespace("js-admin", data_dir=folder).start()
    else:
        ns = entra_namespace(folder, "js-admin")
    try:
        yield Target(ns, request.param)
    finally:
        ns.close()


@pytest.fixture(scope="module")
def seen(target: Target) -> dict[str, Any]:
    """What ``js/admin.js`` printed, after a queue with 3 active and 1 scheduled message was made for it."""
    sdk = service_bus_sdk()
    with target.admin() as admin:
        admin.create_queue("js-counted")
    with target.client() as client, client.get_queue_sender("js-counted") as sender:
        sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
        later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        sender.schedule_messages(ServiceBusMessage("later"), later)
    run = run_js(sdk, SCRIPTS / "admin.js", target.js_env(), timeout=120)
    assert not run.timed_out, run.explain()
    results = run.results()
    assert set(results) >= {"namespace", "queues", "topics", "subscriptions", "rules", "listing"}, (
        run.explain()
    )
    return results


def ok(seen: dict[str, Any], section: str) -> dict[str, Any]:
    """One section's observations; fails with the SDK's error when the section raised."""
    part: dict[str, Any] = seen[section]
    assert "error" not in part, f"{section}: {part.get('error')}"
    return part


def test_tokens_signed_over_each_request_url_with_its_query_are_accepted(seen: dict[str, Any]) -> None:
    # The client's very first call: with SAS, a 401 here ("token audience '...?api-version=2021-05' does not
    # cover") is the audience check taking the query for part of the path.
    assert ok(seen, "namespace") == {"name": "js-admin", "messagingSku": "Standard"}


def test_queue_and_topic_descriptions_carry_what_the_client_requires(seen: dict[str, Any]) -> None:
    queues = ok(seen, "queues")
    assert queues["created"] == {
        "name": "js-q",
        "lockDuration": "PT45S",
        "maxDeliveryCount": 7,
        "enableExpress": True,
        "userMetadata": "meta",
        "defaultMessageTimeToLive": "PT1H",
        "status": "Active",
    }
    assert queues["fetched"]["name"] == "js-counted" and queues["fetched"]["enableExpress"] is False
    topics = ok(seen, "topics")
    assert topics["created"] == {"name": "js-t", "maxSizeInMegabytes": 2048, "express": False}


def test_queue_crud_and_runtime_properties(seen: dict[str, Any]) -> None:
    queues = ok(seen, "queues")
    assert (queues["updated"]["maxDeliveryCount"], queues["updated"]["lockDuration"]) == (9, "PT50S")
    assert (queues["duplicate"], queues["existed"], queues["existsAfterDelete"], queues["missing"]) == (
        409,
        True,
        False,
        404,
    )
    runtime = queues["runtime"]
    assert (runtime["name"], runtime["activeMessageCount"], runtime["scheduledMessageCount"]) == (
        "js-counted",
        3,
        1,
    )
    assert runtime["totalMessageCount"] == 4 and runtime["deadLetterMessageCount"] == 0
    topics = ok(seen, "topics")
    assert topics["updated"] == {"name": "js-t-gone", "userMetadata": "about to go"}
    assert topics["existsAfterDelete"] is False


def test_create_subscription_with_default_rule_options_starts_with_that_rule(
    seen: dict[str, Any], target: Target
) -> None:
    subscriptions = ok(seen, "subscriptions")
    rules = subscriptions["rules"]
    assert rules["plain"] == [{"name": "$Default", "filter": {"sqlExpression": "1=1"}, "action": {}}]
    [red] = rules["only-red"]
    assert red["name"] == "red"
    assert red["filter"]["correlationId"] == "red" and red["filter"]["applicationProperties"] == {"shade": 1}
    [blue] = rules["only-blue"]
    assert (blue["name"], blue["filter"]["sqlExpression"]) == ("$Default", "color = 'blue'")
    # What the rules do, through the Python SDK: each subscription gets only what its first rule matches
    with target.client() as client:
        with client.get_topic_sender("js-t") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage("red", correlation_id="red", application_properties={"shade": 1}),
                    ServiceBusMessage("blue", application_properties={"color": "blue"}),
                ]
            )
        for subscription, expected in (
            ("plain", ["red", "blue"]),
            ("only-red", ["red"]),
            ("only-blue", ["blue"]),
        ):
            with client.get_subscription_receiver("js-t", subscription) as receiver:
                got = receive(receiver, len(expected))
                for message in got:
                    receiver.complete_message(message)
                receive_nothing(receiver, wait=0.3)
            assert [str(m) for m in got] == expected, subscription


def test_subscription_and_rule_crud(seen: dict[str, Any]) -> None:
    subscriptions = ok(seen, "subscriptions")
    assert subscriptions["created"] == {
        "topicName": "js-t",
        "subscriptionName": "only-red",
        "status": "Active",
    }
    assert subscriptions["updatedMaxDeliveryCount"] == 6 and subscriptions["exists"] is True
    assert subscriptions["runtime"] == {"subscriptionName": "plain", "totalMessageCount": 0}
    assert subscriptions["topicRuntime"]["subscriptionCount"] == 3
    rules = ok(seen, "rules")
    assert rules["created"] == {
        "name": "big",
        "filter": {"sqlExpression": "n > @min", "sqlParameters": {"@min": 3}},
        "action": {"sqlExpression": "SET flagged = 1"},
    }
    assert rules["updated"]["name"] == "big"
    assert rules["updated"]["filter"]["subject"] == "hello"
    assert rules["updated"]["filter"]["applicationProperties"] == {"tier": "gold"}
    assert rules["existed"] is True and rules["subscriptionGone"] is True


def test_listing_pages_and_runtime_lists(seen: dict[str, Any]) -> None:
    listing = ok(seen, "listing")
    names = ["js-counted", *(f"js-page-{i}" for i in range(5))]
    assert listing["queuePages"] == [names[0:2], names[2:4], names[4:6]]
    assert listing["queueRuntime"] == [[name, 3 if name == "js-counted" else 0] for name in names]
    assert listing["topics"] == ["js-t"]
    assert listing["topicRuntime"] == [["js-t", 3]]
    assert listing["subscriptionPages"] == [2, 1]
    assert listing["subscriptionRuntime"] == ["only-blue", "only-red", "plain"]


def test_the_python_client_reads_what_the_javascript_client_wrote(
    seen: dict[str, Any], target: Target
) -> None:
    ok(seen, "subscriptions")
    with target.admin() as admin:
        [rule] = admin.list_rules("js-t", "only-red")
        assert rule.name == "red" and getattr(rule.filter, "correlation_id", None) == "red"
        assert admin.get_queue("js-counted").max_delivery_count == 10
