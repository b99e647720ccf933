"""The fault-control interface end to end over loopback HTTP: app, client and ``bridge emulator-ctl``.

The namespace behind it is a stand-in with a real ``FaultState`` (the broker is not needed to test the
control surface); the real emulator is exercised in tests/integration/test_emulator_faults.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from bridge.cli.main import app as cli
from bridge.embedded.ports import free_port
from bridge.emulator.control_client import ControlClient
from bridge.emulator.faults import FaultState
from bridge.emulator.http.control import make_control_app
from bridge.errors import EmulatorError
from tests.loop_server import LoopThread


class StandInNamespace:
    """Implements ``NamespaceControl`` with real fault state and a recorded disaster."""

    def __init__(self) -> None:
        self.faults = FaultState()
        self.disasters = 0
        self.detached: list[str | None] = []

    def disaster(self) -> None:
        self.disasters += 1

    def detach(self, entity: str | None = None) -> int:
        self.detached.append(entity)
        return 2

    def status(self) -> dict[str, Any]:
        return {
            "name": "primary",
            "queues": 0,
            "topics": 0,
            "connections": 0,
            "faults": self.faults.snapshot(),
        }


@pytest.fixture
def served() -> Iterator[tuple[StandInNamespace, str]]:
    namespace = StandInNamespace()
    with LoopThread() as loop:
        port = loop.serve(make_control_app(namespace))
        yield namespace, f"http://127.0.0.1:{port}"


def test_client_switches_faults_and_reads_them(served: tuple[StandInNamespace, str]) -> None:
    namespace, url = served
    client = ControlClient(url)
    assert client.health()
    client.outage()
    client.busy(0.25, entity="q1")
    client.stall(entity="q2")
    faults = client.faults()
    assert faults["namespace"]["fault"] == "outage"
    assert faults["entities"]["q1"] == {
        "fault": "busy",
        "entity": "q1",
        "probability": 0.25,
        "delay": None,
        "window": None,
    }
    assert faults["entities"]["q2"]["delay"] is None
    assert client.restore("q1")["cleared"][0]["entity"] == "q1"
    assert set(client.status()["faults"]["entities"]) == {"q2"}
    client.restore()
    assert namespace.faults.active() == []
    client.blackhole()
    assert namespace.faults.for_namespace() is not None
    client.disaster()
    assert namespace.disasters == 1
    assert client.throttle(window=2.5, probability=0.1)["fault"]["window"] == 2.5
    assert client.detach("q1") == {"detached": 2}
    assert client.detach() == {"detached": 2}
    assert namespace.detached == ["q1", None]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"fault": "meltdown"}, "fault"),
        ({}, "fault"),
        ({"fault": "busy", "probability": 2}, "probability"),
        ({"fault": "busy", "probability": "1"}, "probability"),
        ({"fault": "stall", "delay": -3}, "delay"),
        ({"fault": "outage", "entity": 5}, "entity"),
        ({"fault": "outage", "colour": "red"}, "colour"),
        ([1, 2], "body"),
    ],
)
def test_bad_fault_requests_are_400_naming_the_field(
    served: tuple[StandInNamespace, str], body: Any, field: str
) -> None:
    namespace, url = served
    namespace.faults.set("busy", entity="keep")
    before = namespace.faults.snapshot()
    response = httpx.post(f"{url}/faults", json=body)
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert namespace.faults.snapshot() == before


def test_malformed_json_and_unknown_routes(served: tuple[StandInNamespace, str]) -> None:
    _, url = served
    bad = httpx.post(f"{url}/faults", content=b"{not json", headers={"Content-Type": "application/json"})
    assert (bad.status_code, bad.json()["field"]) == (400, "body")
    assert httpx.get(f"{url}/nowhere").status_code == 404
    assert httpx.get(f"{url}/disaster").status_code == 405
    assert httpx.post(f"{url}/restore", json={"entity": "q1", "extra": 1}).status_code == 400


def test_client_translates_refusals_and_unreachable_servers(served: tuple[StandInNamespace, str]) -> None:
    _, url = served
    with pytest.raises(EmulatorError, match=r"refused with 400 \(probability\)"):
        ControlClient(url).busy(probability=7)
    with pytest.raises(EmulatorError, match="unreachable"):
        ControlClient(f"http://127.0.0.1:{free_port()}", timeout=1).status()


def test_cli_drives_the_control_interface(served: tuple[StandInNamespace, str]) -> None:
    namespace, url = served
    runner = CliRunner()
    result = runner.invoke(
        cli, ["emulator-ctl", "--control-url", url, "busy", "--probability", "0.5", "--entity", "q1"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["fault"]["probability"] == 0.5
    fault = namespace.faults.for_entity("q1")
    assert fault is not None and fault.probability == 0.5
    result = runner.invoke(cli, ["emulator-ctl", "--control-url", url, "status"])
    assert json.loads(result.stdout)["name"] == "primary"
    assert runner.invoke(cli, ["emulator-ctl", "--control-url", url, "restore"]).exit_code == 0
    assert namespace.faults.active() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["outage", "--probability", "0.5"], "--probability applies to busy and throttle only"),
        (["throttle"], "--window is required for throttle"),
        (["busy", "--window", "1"], "--window is required for throttle and applies to it only"),
        (["throttle", "--window", "1", "--entity", "q1"], "--entity does not apply to throttle"),
        (["busy", "--delay", "1"], "--delay applies to stall only"),
        (["disaster", "--entity", "q1"], "--entity does not apply to disaster"),
        (["busy", "--probability", "3"], "refused with 400 (probability)"),
    ],
)
def test_cli_refuses_bad_combinations(
    served: tuple[StandInNamespace, str], args: list[str], message: str
) -> None:
    namespace, url = served
    result = CliRunner().invoke(cli, ["emulator-ctl", "--control-url", url, *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert namespace.faults.active() == [] and namespace.disasters == 0
