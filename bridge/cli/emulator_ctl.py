"""``bridge emulator-ctl``: switch faults on a running local namespace (``bridge emulator``).

``bridge emulator-ctl --control-url http://127.0.0.1:<port> outage [--entity q1]``; the URL is the
``control_url`` printed by ``bridge emulator --json`` (or ``$BRIDGE_EMULATOR_CONTROL_URL``). Prints the
server's JSON answer; a refused or unreachable control interface prints one line on stderr and exits 2.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer

from bridge.emulator.control_client import ControlClient
from bridge.errors import EmulatorError


class Action(StrEnum):
    """What to do."""

    OUTAGE = "outage"
    RESTORE = "restore"
    DISASTER = "disaster"
    BUSY = "busy"
    STALL = "stall"
    BLACKHOLE = "blackhole"
    THROTTLE = "throttle"
    DETACH = "detach"
    STATUS = "status"
    FAULTS = "faults"


def register(app: typer.Typer) -> None:
    """Add the ``emulator-ctl`` command."""
    app.command(name="emulator-ctl", help="Switch faults on a running local namespace.")(emulator_ctl)


def emulator_ctl(
    action: Annotated[Action, typer.Argument(help="What to do.")],
    control_url: Annotated[
        str,
        typer.Option(
            envvar="BRIDGE_EMULATOR_CONTROL_URL", help="The control URL printed by `bridge emulator --json`."
        ),
    ],
    entity: Annotated[str | None, typer.Option(help="Limit the fault (or restore) to one entity.")] = None,
    probability: Annotated[
        float | None, typer.Option(help="busy/throttle: chance a request is refused / trips (0..1).")
    ] = None,
    delay: Annotated[float | None, typer.Option(help="stall: seconds before settling (omit: never).")] = None,
    window: Annotated[
        float | None, typer.Option(help="throttle: seconds every request is refused once tripped.")
    ] = None,
) -> None:
    """Send one control request and print the answer as JSON."""
    client = ControlClient(control_url)
    if probability is not None and action not in (Action.BUSY, Action.THROTTLE):
        _fail("--probability applies to busy and throttle only")
    if (window is None) is (action is Action.THROTTLE):
        _fail("--window is required for throttle and applies to it only")
    if delay is not None and action is not Action.STALL:
        _fail("--delay applies to stall only")
    if entity is not None and action in (
        Action.DISASTER,
        Action.BLACKHOLE,
        Action.THROTTLE,
        Action.STATUS,
        Action.FAULTS,
    ):
        _fail(f"--entity does not apply to {action.value}")
    try:
        if action is Action.THROTTLE:
            assert window is not None
            answer = client.throttle(window, 1.0 if probability is None else probability)
        else:
            answer = _run(client, action, entity, probability, delay)
    except EmulatorError as exc:
        _fail(str(exc))
    typer.echo(json.dumps(answer, indent=2))


def _run(
    client: ControlClient, action: Action, entity: str | None, probability: float | None, delay: float | None
) -> dict[str, Any]:
    if action is Action.OUTAGE:
        return client.outage(entity)
    if action is Action.RESTORE:
        return client.restore(entity)
    if action is Action.DISASTER:
        return client.disaster()
    if action is Action.BUSY:
        return client.busy(1.0 if probability is None else probability, entity)
    if action is Action.STALL:
        return client.stall(delay, entity)
    if action is Action.BLACKHOLE:
        return client.blackhole()
    if action is Action.DETACH:
        return client.detach(entity)
    if action is Action.FAULTS:
        return client.faults()
    return client.status()


def _fail(message: str) -> None:
    typer.echo(f"bridge emulator-ctl: {message}", err=True)
    raise typer.Exit(2)
