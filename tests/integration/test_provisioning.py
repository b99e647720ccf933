"""``bridge provision`` against real local namespaces through the real SDK (``docs/provisioning.md``).

Everything is read back with a plain ``ServiceBusAdministrationClient``, not with the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import QueueProperties, ServiceBusAdministrationClient

from bridge.core.provisioning import BACKLOG_QUEUE, INT_MAX, Provision
from bridge.embedded.namespaces import LocalNamespace
from bridge.servicebus.admin import NamespaceAdmin
from bridge.servicebus.provisioning import _create, provision
from bridge.settings import Settings

pytestmark = pytest.mark.timeout(180)
# What the SDK reads back for TimeSpan.MaxValue ("P10675199DT2H48M5.4775807S").
NEVER = timedelta(days=10675199, seconds=10085, microseconds=477581)
Factory = Callable[..., LocalNamespace]


def namespace(local: LocalNamespace, **extra: str) -> dict[str, str]:
    return {"connection_string": local.connection_string, "certificate": local.certificate, **extra}


def make_settings(
    primary: LocalNamespace, secondary: LocalNamespace, *, count: int = 10, **extra: Any
) -> Settings:
    return Settings(
        primary=namespace(primary, **extra.pop("primary_extra", {})),
        secondary=namespace(secondary),
        paired={"backlog_queue_count": count},
        **extra,
    )


@contextmanager
def sdk_admin(local: LocalNamespace) -> Iterator[ServiceBusAdministrationClient]:
    client = ServiceBusAdministrationClient.from_connection_string(
        local.connection_string, connection_verify=local.certificate
    )
    with client:
        yield client


def queues(local: LocalNamespace) -> dict[str, QueueProperties]:
    with sdk_admin(local) as admin:
        return {q.name: q for q in admin.list_queues()}


def assert_backlog_description(queue: QueueProperties, lock: timedelta = timedelta(minutes=1)) -> None:
    assert queue.max_size_in_megabytes == 5120
    assert queue.max_delivery_count == INT_MAX == 2_147_483_647
    assert queue.default_message_time_to_live == NEVER
    assert queue.auto_delete_on_idle == NEVER
    assert queue.lock_duration == lock
    assert queue.dead_lettering_on_message_expiration is True
    assert queue.enable_batched_operations is True


@pytest.fixture
def primary(shared_namespace: LocalNamespace) -> LocalNamespace:
    """Backlog provisioning only reads the primary's name; entity tests start their own pair."""
    return shared_namespace


def test_fresh_secondary_gets_exactly_count_backlog_queues_and_a_rerun_creates_nothing(
    primary: LocalNamespace, namespace_factory: Factory
) -> None:
    # Given an empty secondary and the primary's name derived from its endpoint (127-0-0-1-<port>)
    secondary = namespace_factory("secondary")
    settings = make_settings(primary, secondary, count=10)
    assert settings.primary is not None
    name = settings.primary.namespace_name
    assert name == f"127-0-0-1-{primary.port}"
    # When provisioning runs
    report = provision(settings)
    # Then exactly the ten backlog queues exist, each with the backlog queue description
    expected = [f"{name}/x-servicebus-transfer/{i}" for i in range(10)]
    found = queues(secondary)
    assert sorted(found) == sorted(expected)
    for queue in found.values():
        assert_backlog_description(queue)
    assert [(r.name, r.action, r.role, r.purpose) for r in report.rows] == [
        (q, "created", "secondary", "backlog") for q in expected
    ]
    # When it runs again, nothing is created and everything is reported as existing
    again = provision(settings)
    assert [r.action for r in again.rows] == ["exists"] * 10
    assert again.counts()["created"] == 0
    assert sorted(queues(secondary)) == sorted(expected)


def test_existing_differing_and_extra_backlog_queues_are_reported_and_left_alone(
    primary: LocalNamespace, namespace_factory: Factory
) -> None:
    secondary = namespace_factory("secondary")
    options = BACKLOG_QUEUE.options()
    # Given /7 as it should be (with a message in it), /3 with a 30 s lock, /12 beyond the count of 10
    with sdk_admin(secondary) as admin:
        admin.create_queue("contoso/x-servicebus-transfer/7", user_metadata="keep me", **options)
        admin.create_queue(
            "contoso/x-servicebus-transfer/3", **{**options, "lock_duration": timedelta(seconds=30)}
        )
        admin.create_queue("contoso/x-servicebus-transfer/12", **options)
        # and /11, beyond the count too, still holding two messages (the count was lowered)
        admin.create_queue("contoso/x-servicebus-transfer/11", **options)
    with ServiceBusClient.from_connection_string(secondary.connection_string) as client:
        with client.get_queue_sender("contoso/x-servicebus-transfer/7") as sender:
            sender.send_messages(ServiceBusMessage(b"still here"))
        with client.get_queue_sender("contoso/x-servicebus-transfer/11") as sender:
            sender.send_messages([ServiceBusMessage(b"left 1"), ServiceBusMessage(b"left 2")])
    # When provisioning runs for count 10 with the primary's name set explicitly
    report = provision(make_settings(primary, secondary, count=10, primary_extra={"name": "contoso"}))
    rows = {r.name: r for r in report.rows}
    # Then /7 exists, /3 differs in LockDuration only, /12 is extra, the other eight are created
    assert rows["contoso/x-servicebus-transfer/7"].action == "exists"
    differing = rows["contoso/x-servicebus-transfer/3"]
    assert differing.action == "differs"
    assert [d.field for d in differing.differences] == ["lock_duration"]
    assert differing.to_json()["differences"] == [
        {"field": "lock_duration", "wanted": "PT1M", "actual": "PT30S"}
    ]
    assert rows["contoso/x-servicebus-transfer/12"].action == "extra"
    # And /11 is retired, not "yours to delete": it still holds messages the syphon must move
    retired = rows["contoso/x-servicebus-transfer/11"]
    assert (retired.action, retired.messages, retired.to_json()["messages"]) == ("retired", 2, 2)
    assert report.counts() == {
        "exists": 1,
        "created": 8,
        "differs": 1,
        "extra": 1,
        "retired": 1,
        "would-create": 0,
    }
    # And nothing was changed or deleted: /3 keeps its lock, /12 is still there, /7 kept its message
    found = queues(secondary)
    assert len(found) == 12
    assert_backlog_description(found["contoso/x-servicebus-transfer/3"], lock=timedelta(seconds=30))
    assert found["contoso/x-servicebus-transfer/7"].user_metadata == "keep me"
    with sdk_admin(secondary) as admin:
        runtime = admin.get_queue_runtime_properties("contoso/x-servicebus-transfer/7")
    assert runtime.active_message_count == 1


def test_dry_run_changes_nothing(primary: LocalNamespace, namespace_factory: Factory) -> None:
    secondary = namespace_factory("secondary")
    report = provision(make_settings(primary, secondary, count=4), dry_run=True)
    assert [r.action for r in report.rows] == ["would-create"] * 4
    assert report.to_json()["dry_run"] is True
    assert queues(secondary) == {}


def test_entities_are_created_on_both_namespaces_and_dry_run_changes_nothing(
    namespace_factory: Factory,
) -> None:
    primary, secondary = namespace_factory("primary"), namespace_factory("secondary")
    entities = {
        "orders": {"requires_session": True},
        "audit": {"requires_duplicate_detection": True, "replication": "active"},
        "big": {"max_message_size": 2 * 1024 * 1024},
        "events": {},
        "local-only": {"replication": "none"},
    }
    settings = make_settings(primary, secondary, count=2, entities=entities)
    # Given a topic "events" already on the primary
    with sdk_admin(primary) as admin:
        admin.create_topic("events")
    # When a dry run goes first, nothing appears anywhere
    dry = provision(settings, entities=True, dry_run=True)
    assert queues(primary) == {} and queues(secondary) == {}
    assert {(r.role, r.name): r.action for r in dry.rows if r.purpose == "entity"} == {
        ("primary", "orders"): "would-create",
        ("primary", "audit"): "would-create",
        ("primary", "big"): "would-create",
        ("primary", "events"): "exists",
        ("primary", "local-only"): "would-create",
        ("secondary", "orders"): "would-create",
        ("secondary", "audit"): "would-create",
        ("secondary", "big"): "would-create",
        ("secondary", "events"): "would-create",
    }
    # When it runs for real
    report = provision(settings, entities=True)
    # Then both namespaces hold the entities with their options ("local-only" only on the primary)
    on_primary, on_secondary = queues(primary), queues(secondary)
    assert sorted(on_primary) == ["audit", "big", "local-only", "orders"]
    assert sorted(on_secondary) == sorted(
        ["audit", "big", "events", "orders"]
        + [f"127-0-0-1-{primary.port}/x-servicebus-transfer/{i}" for i in (0, 1)]
    )
    for found in (on_primary, on_secondary):
        assert found["orders"].requires_session is True
        assert found["orders"].requires_duplicate_detection is False
        assert found["audit"].requires_duplicate_detection is True
        assert found["big"].max_message_size_in_kilobytes == 2048
    events = next(r for r in report.rows if (r.role, r.name) == ("primary", "events"))
    assert (events.entity_type, events.action) == ("topic", "exists")
    # And a rerun only finds what it made
    again = provision(settings, entities=True)
    assert {r.action for r in again.rows} == {"exists"}


def test_entity_with_other_options_is_reported_not_changed(namespace_factory: Factory) -> None:
    primary, secondary = namespace_factory("primary"), namespace_factory("secondary")
    with sdk_admin(primary) as admin:
        admin.create_queue("orders", requires_session=False)
    settings = make_settings(primary, secondary, count=1, entities={"orders": {"requires_session": True}})
    report = provision(settings, entities=True)
    row = next(r for r in report.rows if (r.role, r.name) == ("primary", "orders"))
    assert row.action == "differs"
    assert row.to_json()["differences"] == [{"field": "requires_session", "wanted": True, "actual": False}]
    assert queues(primary)["orders"].requires_session is False


def test_a_queue_created_meanwhile_by_someone_else_is_compared_not_an_error(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    # Given a plan made before another provisioner created the queue (with a 30 s lock)
    with sdk_admin(shared_namespace) as admin:
        admin.create_queue(unique_name, **{**BACKLOG_QUEUE.options(), "lock_duration": timedelta(seconds=30)})
    settings = make_settings(shared_namespace, shared_namespace)
    assert settings.secondary is not None
    with NamespaceAdmin(settings.secondary, role="secondary") as admin:
        action, diffs = _create(admin, Provision(unique_name, "create", BACKLOG_QUEUE))
    # Then the conflict is read back and reported as differing, not raised
    assert action == "differs"
    assert [d.field for d in diffs] == ["lock_duration"]


# ---- the CLI as a real process ----------------------------------------------------------------------


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    bridge = str(Path(sys.executable).parent / "bridge")
    return subprocess.run(
        [bridge, "provision", *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def cli_env(primary: LocalNamespace, secondary: LocalNamespace | None, count: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("BRIDGE_")}
    env.update(
        {
            "BRIDGE_PRIMARY__CONNECTION_STRING": primary.connection_string,
            "BRIDGE_PRIMARY__CERTIFICATE": primary.certificate,
            "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": str(count),
            "COLUMNS": "200",
            "NO_COLOR": "1",
        }
    )
    if secondary is not None:
        env["BRIDGE_SECONDARY__CONNECTION_STRING"] = secondary.connection_string
        env["BRIDGE_SECONDARY__CERTIFICATE"] = secondary.certificate
    return env


def test_cli_json_table_unreachable_secondary_and_missing_settings(
    namespace_factory: Factory,
) -> None:
    primary, secondary = namespace_factory("primary"), namespace_factory("secondary")
    env = cli_env(primary, secondary, count=3)
    name = f"127-0-0-1-{primary.port}"
    # When the CLI provisions with --json, stdout is one JSON object
    proc = run_cli(env, "--json")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["namespaces"] == {"primary": name, "secondary": f"127-0-0-1-{secondary.port}"}
    assert shown["counts"]["created"] == 3
    assert [(q["name"], q["action"]) for q in shown["queues"]] == [
        (f"{name}/x-servicebus-transfer/{i}", "created") for i in range(3)
    ]
    assert sorted(queues(secondary)) == [f"{name}/x-servicebus-transfer/{i}" for i in range(3)]
    # And the table form shows the same queues as existing
    table = run_cli(env)
    assert table.returncode == 0, table.stderr
    assert f"{name}/x-servicebus-transfer/2" in table.stdout and "exists: 3" in table.stdout
    # When the secondary is down, the error names its role and exits 1 without any key
    secondary.stop()
    down = run_cli(env, "--json")
    assert down.returncode == 1
    assert down.stdout == ""
    assert len(down.stderr.splitlines()) == 1
    assert down.stderr.startswith(
        f"bridge provision: secondary namespace (127-0-0-1-{secondary.port}) failed"
    )
    for key in (primary.key, secondary.key):
        assert key not in down.stderr + down.stdout
    # When the secondary is not configured at all, it is a configuration error: one line, exit 2
    missing = run_cli(cli_env(primary, None, count=3))
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        "bridge: configuration error: bridge provision needs both namespaces: set primary and secondary "
        "(connection_string, or fully_qualified_namespace and credential)"
    ]
    assert primary.key not in missing.stderr
