"""The ``bridge status --json`` contract, from ``collect_status`` and from the real CLI process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from bridge.core.cost import Operation
from bridge.core.error_classes import ErrorClass
from bridge.core.journal import EventKind, JournalEvent
from bridge.core.paired import EngageFailover, RecordError, RemoveFromRotation
from bridge.core.roles import NamespaceHealth, RoleState, Swap
from bridge.embedded.ports import free_port
from bridge.journal.store import JournalStore
from bridge.outbox.reader import OutboxReader
from bridge.producer import Producer
from bridge.settings import Settings
from bridge.state.cost import CostStore
from bridge.state.paired import PairedStore
from bridge.state.retry import RetryStore
from bridge.state.roles import RoleStore
from bridge.status.collect import collect_status
from tests.integration.outbox_support import shard_lease

SECRET = "TOPSECRETkey0123456789abcdef+/="
PRIMARY_CS = f"Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={SECRET}"
SECONDARY_CS = f"Endpoint=sb://ns2.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={SECRET}"
CONTRACT_ENTITY_KEYS = {"name", "replication", "active", "namespaces", "outbox_depth", "dead_letter_depth"}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("BRIDGE_"):
            monkeypatch.delenv(name)


def make_settings(redis_url: str, **entities: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        primary={"connection_string": PRIMARY_CS},
        secondary={"connection_string": SECONDARY_CS},
        entities={name: {"replication": mode} for name, mode in entities.items()},
    )


def assert_contract(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Check the contract's keys and types; return the entities by name."""
    assert isinstance(report, dict) and isinstance(report["entities"], list)
    by_name = {}
    for entity in report["entities"]:
        assert entity.keys() >= CONTRACT_ENTITY_KEYS
        assert isinstance(entity["name"], str)
        assert entity["replication"] in {"passive", "active", "paired", "none"}
        assert entity["active"] in {"primary", "secondary"}
        assert {"primary", "secondary"} <= entity["namespaces"].keys()
        for namespace in (entity["namespaces"]["primary"], entity["namespaces"]["secondary"]):
            assert type(namespace["available"]) is bool
            assert namespace["last_error"] is None or isinstance(namespace["last_error"], str)
        assert type(entity["outbox_depth"]) is int and type(entity["dead_letter_depth"]) is int
        by_name[entity["name"]] = entity
    assert json.loads(json.dumps(report)) == report  # plain JSON types only
    return by_name


def test_configured_entities_without_any_state(redis_client: redis.Redis, redis_url: str) -> None:
    report = collect_status(make_settings(redis_url, orders="passive", events="paired"), redis_client)

    entities = assert_contract(report)
    assert [e["name"] for e in report["entities"]] == ["events", "orders"]
    for name, mode in (("orders", "passive"), ("events", "paired")):
        entity = entities[name]
        assert {k: entity[k] for k in CONTRACT_ENTITY_KEYS} == {
            "name": name,
            "replication": mode,
            "active": "primary",
            "namespaces": entity["namespaces"],
            "outbox_depth": 0,
            "dead_letter_depth": 0,
        }
        for role in ("primary", "secondary"):
            assert entity["namespaces"][role]["available"] is True
            assert entity["namespaces"][role]["last_error"] is None
        assert entity["epoch"] == 0 and entity["cost"]["total"] == 0
    assert entities["events"]["paired"]["failed_over"] is False
    assert "paired" not in entities["orders"]
    assert report["backlog"]["in_rotation"] == list(range(10))


def test_no_entities_is_an_empty_list(redis_client: redis.Redis, redis_url: str) -> None:
    report = collect_status(make_settings(redis_url), redis_client)
    assert report["entities"] == []
    assert "backlog" not in report


def test_passive_state_depths_and_secret_free_errors(redis_client: redis.Redis, redis_url: str) -> None:
    settings = make_settings(redis_url, orders="passive")
    # Given three messages in the outbox, one of them moved to the local dead-letter stream
    with Producer(settings=settings) as producer:
        for i in range(3):
            producer.send("orders", f"m{i}")
    reader = OutboxReader(redis_client, settings)
    reader.ensure_groups("orders")
    with shard_lease(reader, "orders", 0) as fence:
        first = reader.read_fenced("orders", 0, "test", fence, 1).entries[0]
        reader.move(
            first, to="deadletter", code="message_permanent", reason="too large", now=1.0, fence=fence
        )
    # and a failover: the primary failed with an error text that carries a key, the roles swapped
    roles = RoleStore(redis_client)
    roles.set_health(
        "orders",
        "primary",
        NamespaceHealth(False, 5.0, f"AuthError: SharedAccessKey={SECRET};", 5.0, ErrorClass.OUTAGE),
    )
    assert roles.swap("orders", Swap("primary", "secondary", 0, 1, 5.5, "outage on primary"))[0]
    CostStore(redis_client).add("orders", Operation.BACKUP_SEND, 2)
    RetryStore(redis_client).back_off("orders", 0, 99.5)
    seconds, micros = redis_client.time()

    entities = assert_contract(collect_status(settings, redis_client))

    orders = entities["orders"]
    assert (orders["active"], orders["epoch"], orders["role_swapped_at"]) == ("secondary", 1, 5.5)
    assert (orders["outbox_depth"], orders["dead_letter_depth"]) == (2, 1)
    primary = orders["namespaces"]["primary"]
    assert primary["available"] is False and primary["error_class"] == "outage"
    assert primary["last_error"] == "AuthError: SharedAccessKey=***;"
    assert orders["namespaces"]["secondary"]["available"] is True
    assert orders["cost"]["backup_sends"] == 2 and set(orders["retry_not_before"]) == {"0"}
    assert abs(orders["retry_not_before"]["0"] - (seconds + micros / 1e6 + 99.5)) < 1  # on Redis's clock
    assert SECRET not in json.dumps(entities)


def test_paired_entity_failed_over_shows_the_backlog(redis_client: redis.Redis, redis_url: str) -> None:
    settings = make_settings(redis_url, events="paired")
    paired = PairedStore(redis_client)
    paired.apply(
        "events", [RecordError(10.0, "ServiceBusConnectionError: refused"), EngageFailover(10.0, "x")]
    )
    paired.remove_from_rotation("ns1", RemoveFromRotation(4, 11.0, "QuotaExceeded"))

    report = collect_status(settings, redis_client, now=12.0)
    events = assert_contract(report)["events"]

    assert events["active"] == "secondary"
    assert events["namespaces"]["primary"]["available"] is False
    assert events["namespaces"]["primary"]["last_error"] == "ServiceBusConnectionError: refused"
    assert events["paired"]["failed_over"] is True and events["paired"]["failed_over_at"] == 10.0
    assert RoleStore(redis_client).get("events") == RoleState()  # paired mode never swaps roles
    assert report["backlog"]["namespace"] == "ns1"
    assert report["backlog"]["removed"] == {"4": {"at": 11.0, "error": "QuotaExceeded"}}
    assert 4 not in report["backlog"]["in_rotation"]


def test_an_entity_with_only_an_outbox_is_listed(redis_client: redis.Redis, redis_url: str) -> None:
    settings = make_settings(redis_url, orders="passive")
    with Producer(settings=settings) as producer:
        producer.send("adhoc", "x")
    entities = assert_contract(collect_status(settings, redis_client))
    assert entities["adhoc"]["outbox_depth"] == 1
    assert entities["adhoc"]["configured"] is False and entities["adhoc"]["replication"] == "passive"


# ---- the real command ---------------------------------------------------------------------------------


def bridge(*args: str, redis_url: str, entities: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).parent / "bridge"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("BRIDGE_")}
    env.update(
        BRIDGE_REDIS_URL=redis_url,
        BRIDGE_ENTITIES=json.dumps(entities),
        BRIDGE_PRIMARY__CONNECTION_STRING=PRIMARY_CS,
        BRIDGE_SECONDARY__CONNECTION_STRING=SECONDARY_CS,
        COLUMNS="200",
        NO_COLOR="1",
    )
    return subprocess.run(
        [str(executable), "status", *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_cli_json_prints_one_contract_object(redis_client: redis.Redis, redis_url: str) -> None:
    RoleStore(redis_client).swap("orders", Swap("primary", "secondary", 0, 1, 1.0, "outage"))
    proc = bridge("--json", redis_url=redis_url, entities={"orders": {"replication": "passive"}, "b": {}})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # the whole output is one JSON document
    entities = assert_contract(report)
    assert sorted(entities) == ["b", "orders"]
    assert entities["orders"]["active"] == "secondary"
    assert SECRET not in proc.stdout + proc.stderr


def test_cli_table_and_listing_options(redis_client: redis.Redis, redis_url: str) -> None:
    RoleStore(redis_client).set_health(
        "orders",
        "secondary",
        NamespaceHealth(False, 1.0, "[amqp:not-found] gone", 1.0, ErrorClass.CONFIGURATION),
    )
    table = bridge(redis_url=redis_url, entities={"orders": {"replication": "active"}})
    assert table.returncode == 0, table.stderr
    assert "orders" in table.stdout and "active" in table.stdout
    assert "[amqp:not-found] gone" in table.stdout  # error text is not taken for markup

    listing = bridge("--deadletter", "orders", redis_url=redis_url, entities={"orders": {}})
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout) == []


def test_cli_listing_of_an_unknown_entity_says_so(redis_client: redis.Redis, redis_url: str) -> None:
    # Given one configured entity and one that only ever reached the outbox
    with Producer(settings=make_settings(redis_url)) as producer:
        producer.send("written", "x")
    for which in ("--quarantine", "--deadletter"):
        # When a misspelled name is listed: an error naming the known ones, not an empty list
        typo = bridge(which, "ordres", redis_url=redis_url, entities={"orders": {}})
        assert typo.returncode == 1, typo.stdout
        assert typo.stdout == ""
        assert "unknown entity 'ordres'" in typo.stderr
        assert "known entities: orders, written" in typo.stderr
        # Then the entity only the outbox knows is listed (empty), as the configured one is
        known = bridge(which, "written", redis_url=redis_url, entities={"orders": {}})
        assert known.returncode == 0, known.stderr
        assert json.loads(known.stdout) == []


def test_cli_redis_down_fails_without_the_password() -> None:
    password = "TOPSECRETredisPassword0123"
    proc = bridge("--json", redis_url=f"redis://:{password}@127.0.0.1:{free_port()}/0", entities={})
    assert proc.returncode == 1
    # Its first read is Redis's clock, in the state store (the status page's snapshot)
    assert "bridge status: StateStoreUnavailableError: Redis is unreachable" in proc.stderr
    # The line says where it looked and what to check, never with the password.
    port = proc.stderr.split("127.0.0.1:", 1)[1].split(";", 1)[0]
    assert port.isdigit(), proc.stderr
    assert "check that Redis runs there and that redis_url (BRIDGE_REDIS_URL) names it" in proc.stderr
    assert password not in proc.stdout + proc.stderr


def test_cli_unparsable_redis_url_never_echoes_the_password() -> None:
    # An unencoded '/' in the password makes redis-py read the rest as a port and quote it in its error
    proc = bridge("--json", redis_url=f"redis://:{SECRET}@127.0.0.1:6390/0", entities={})
    assert proc.returncode == 2
    assert "redis_url cannot be used" in proc.stderr and "Traceback" not in proc.stderr
    assert "TOPSECRET" not in proc.stdout + proc.stderr


def test_a_full_journal_shows_its_overflow(redis_client: redis.Redis, redis_url: str) -> None:
    settings = Settings(
        redis_url=redis_url,
        primary={"connection_string": PRIMARY_CS},
        entities={"orders": {}},
        journal={"max_length": 2},
    )
    store = JournalStore(redis_client, settings.journal)
    events = [JournalEvent(EventKind.ACCEPTED, 1.0, message_id=f"m{i}") for i in range(5)]
    assert store.append("orders", events) == 2  # the stream holds two, three are counted

    journal = collect_status(settings, redis_client)["entities"][0]["journal"]
    assert journal == {"enabled": True, "length": 2, "max_length": 2, "overflow": {"accepted": 3}}

    table = bridge(redis_url=redis_url, entities={"orders": {}})
    assert table.returncode == 0, table.stderr
    assert "journal of orders is full" in table.stdout and "accepted 3" in table.stdout
