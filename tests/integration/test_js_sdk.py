"""Microsoft's JavaScript SDK (``@azure/service-bus`` 7.9.5) judges the local Service Bus, as Python's does.

Each test runs one Node script of ``tests/integration/js`` (one scenario group) against one namespace shared
by the module, through ``js_sdk_support.run_js``: the script does what an application does with the SDK and
prints what it saw; the test asserts on that. A script that hangs (an answer that never comes) is killed at
its bound and fails with its output. ``docs/local-servicebus.md`` has the table of the client forms covered.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.entra_support import SECRETS, client_id, write_identities
from tests.integration.js_sdk_support import SCRIPTS, JsSdk, run_js, service_bus_beta_sdk, service_bus_sdk
from tests.integration.proxy_support import Tinyproxy

pytestmark = pytest.mark.timeout(120)

ENTITIES = """
[queues.js-messages]
[queues.js-sessions]
requires_session = true
[queues.js-settle]
[queues.js-max-delivery]
max_delivery_count = 2
[queues.js-delete]
[topics.js-rules]
[topics.js-rules.subscriptions.filtered]
"""


@pytest.fixture(scope="module")
def js() -> JsSdk:
    return service_bus_sdk()


@pytest.fixture(scope="module")
def js_beta() -> JsSdk:
    return service_bus_beta_sdk()


@pytest.fixture(scope="module")
def ns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNamespace]:
    """A namespace with the scripts' entities that takes SAS and the local issuer's Entra ID tokens."""
    folder = tmp_path_factory.mktemp("js-sdk")
    entities = folder / "entities.toml"
    entities.write_text(ENTITIES)
    identities = write_identities(folder / "identities")
    namespace = LocalNamespace(
        "js",
        data_dir=folder / "ns",
        entities_file=entities,
        auto_create=True,
        extra_args=("--identities", str(identities), "--identity-dir", str(folder / "issuer")),
    )
    try:
        yield namespace.start()
    finally:
        namespace.close()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tinyproxy]:
    server = Tinyproxy(tmp_path_factory.mktemp("js-proxy"), "bridge", "js-proxy-pass").start()
    try:
        yield server
    finally:
        server.stop()


def sas_env(ns: LocalNamespace) -> dict[str, str]:
    """The namespace's own connection string: plain AMQP to its port (``UseDevelopmentEmulator``)."""
    return {"SB_CONNECTION_STRING": ns.connection_string}


def run(js: JsSdk, script: str, env: dict[str, str], timeout: float = 60.0) -> dict[str, Any]:
    """Run ``js/<script>``; its RESULT values, or a failure that shows what it printed."""
    done = run_js(js, SCRIPTS / script, env, timeout=timeout)
    assert done.returncode == 0, done.explain()
    return done.results()


def test_send_peek_and_receive_in_every_form(js: JsSdk, ns: LocalNamespace) -> None:
    # Given one message, an array and a batch sent without message ids (one array member has its own)
    got = run(js, "messages.js", {**sas_env(ns), "QUEUE": "js-messages"})
    # Then a fresh client peeks them all, with the token it put for "<queue>/$management" only
    assert [m["body"] for m in got["peeked"]] == ["single", "array-1", "array-2", "batch-1", "batch-2"]
    # And Service Bus's own message ids where the sender gave none (32 hex digits), the given one kept
    ids = [m["messageId"] for m in got["peeked"]]
    assert ids[2] == "given-id"
    assert all(isinstance(i, str) and len(i) == 32 and int(i, 16) >= 0 for i in ids[:2] + ids[3:])
    assert len(set(ids)) == 5
    # And receive, subscribe and the iterator take them in order, with properties as they were sent
    assert [m["body"] for m in got["received"]] == ["single", "array-1", "array-2"]
    first = got["received"][0]
    assert first["applicationProperties"] == {"count": 7, "ratio": 1.5, "name": "seven", "flag": True}
    assert (first["subject"], first["contentType"], first["correlationId"]) == (
        "subject-1",
        "text/plain",
        "corr-1",
    )
    assert first["messageId"] == ids[0]
    assert got["streamed"] == ["batch-1", "batch-2"]
    assert got["iterated"]["body"] == "iterated" and got["iterated"]["messageId"]


def test_batch_delete_and_purge_leave_locked_and_newer_messages(js_beta: JsSdk, ns: LocalNamespace) -> None:
    # Given five messages, the first locked by a receiver
    got = run(js_beta, "batch_delete.js", {**sas_env(ns), "QUEUE": "js-delete"})
    assert got["locked"] == "one"
    # When deleteMessages asks for two: the two oldest unlocked ones go
    assert got["deleted"] == 2
    assert got["left"] == ["one", "four", "five"]
    # When purgeMessages runs: every unlocked message goes, the locked one stays
    assert (got["purged"], got["afterPurge"]) == (2, ["one"])
    # And a cut-off an hour ago deletes nothing sent since
    assert got["olderThanAnHour"] == 0


def test_sessions_keep_state_and_hand_out_the_next_available_ones(js: JsSdk, ns: LocalNamespace) -> None:
    got = run(js, "sessions.js", {**sas_env(ns), "QUEUE": "js-sessions"})
    # A named session: its own messages in order, and its state kept after its receiver closed
    assert got["sessionId"] == "red"
    assert got["redMessages"] == ["red-1", "red-2"]
    assert got["state"] == "red state"
    # Round robin: each next available session once, with its messages in order
    sessions = {s["sessionId"]: s["messages"] for s in got["roundRobin"]}
    assert sessions == {"green": ["green-1", "green-2"], "blue": ["blue-1", "blue-2"]}


def test_scheduling_deferral_dead_lettering_max_delivery_and_modified_properties(
    js: JsSdk, ns: LocalNamespace
) -> None:
    env = {**sas_env(ns), "QUEUE": "js-settle", "MAX_DELIVERY_QUEUE": "js-max-delivery"}
    got = run(js, "settlement.js", env)
    # A scheduled message peeks as scheduled, the cancelled one never shows; one due soon arrives, not early
    assert got["scheduled"] == {"peeked": [["later", "scheduled"]], "received": "scheduled", "early": False}
    assert got["scheduledSequence"] is True
    # A deferred message comes back by its sequence number, its lock renewable before
    assert got["deferred"] == {"body": "deferred", "state": "deferred"}
    assert got["renewed"] is True
    # Dead-lettering keeps the reason and description; abandoning past the max delivery count dead-letters
    assert got["deadLettered"] == ["poison", "bad", "very bad"]
    assert got["deliveryCounts"] == [0, 1]
    assert got["maxDelivery"] == ["twice", "MaxDeliveryCountExceeded"]
    # Properties to modify become application properties, over the link and over $management
    modified = got["modified"]
    assert modified["afterAbandon"] == {"kept": "yes", "attempt": 1}
    assert modified["afterDefer"] == {"kept": "yes", "attempt": 1, "deferredBy": "js"}
    assert modified["afterManagement"] == {
        "kept": "yes",
        "attempt": 1,
        "deferredBy": "js",
        "viaManagement": True,
    }
    properties, reason = modified["deadLettered"]
    assert reason == "done"
    assert {k: v for k, v in properties.items() if not k.startswith("DeadLetter")} == {
        "kept": "yes",
        "attempt": 1,
        "deferredBy": "js",
        "viaManagement": True,
        "why": "checked",
    }


def test_rule_manager_filters_a_subscription(js: JsSdk, ns: LocalNamespace) -> None:
    got = run(js, "rules.js", {**sas_env(ns), "TOPIC": "js-rules", "SUBSCRIPTION": "filtered"})
    assert sorted(got["listed"]) == ["invoices", "red", "tagged"]
    assert got["received"] == [
        {"body": "red", "tag": None},
        {"body": "invoice-eu", "tag": None},
        {"body": "green", "tag": "seen"},
    ]
    assert sorted(got["after"]) == ["red", "tagged"]


def tls_env(ns: LocalNamespace) -> dict[str, str]:
    """Node trusts the namespace's certificate for AMQPS and WebSockets."""
    return {"NODE_EXTRA_CA_CERTS": ns.certificate}


def entra_env(ns: LocalNamespace, identity: str = "owner") -> dict[str, str]:
    """A host name and a ClientSecretCredential of the local token issuer (no SAS anywhere)."""
    endpoints = ns.endpoints
    assert endpoints is not None and endpoints.authority and endpoints.tenant_id
    return {
        **tls_env(ns),
        "SB_FQDN": f"localhost:{ns.port}",
        "AZURE_TENANT_ID": endpoints.tenant_id,
        "AZURE_CLIENT_ID": client_id(identity),
        "AZURE_CLIENT_SECRET": SECRETS[identity],
        "AZURE_AUTHORITY_HOST": endpoints.authority,
    }


def test_sas_over_amqps(js: JsSdk, ns: LocalNamespace) -> None:
    # A connection string without UseDevelopmentEmulator: the SDK dials TLS to the endpoint's port
    connection = f"Endpoint=sb://localhost:{ns.port}/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={ns.key}"
    got = run(js, "roundtrip.js", {**tls_env(ns), "SB_CONNECTION_STRING": connection, "QUEUE": "js-amqps"})
    assert (got["peeked"], got["received"]) == (["round trip"], "round trip")


def test_entra_id_over_amqps(js: JsSdk, ns: LocalNamespace) -> None:
    got = run(js, "roundtrip.js", {**entra_env(ns), "QUEUE": "js-entra"})
    assert (got["peeked"], got["received"]) == (["round trip"], "round trip")


def test_default_azure_credential_signs_in_with_the_adfs_tenant(js: JsSdk, ns: LocalNamespace) -> None:
    # DefaultAzureCredential cannot be told to skip instance discovery (a call to Entra ID itself); with
    # AZURE_TENANT_ID=adfs msal skips it and reads the issuer's AD FS metadata
    env = {**entra_env(ns), "AZURE_TENANT_ID": "adfs", "SB_CREDENTIAL": "default", "QUEUE": "js-default"}
    got = run(js, "roundtrip.js", env)
    assert (got["peeked"], got["received"]) == (["round trip"], "round trip")


def test_entra_id_over_websockets_through_a_proxy(js: JsSdk, ns: LocalNamespace, proxy: Tinyproxy) -> None:
    # The SDK's own WebSocket option (the "ws" package) with an HTTPS proxy agent, as its proxy sample does
    env = {**entra_env(ns), "SB_WEBSOCKETS": "1", "HTTPS_PROXY": proxy.url, "QUEUE": "js-websockets"}
    got = run(js, "roundtrip.js", env)
    assert (got["peeked"], got["received"]) == (["round trip"], "round trip")
    assert f"localhost:{ns.port}" in proxy.connects()  # the tunnel went through the proxy
