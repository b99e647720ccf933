"""``bridge demo``: the whole bridge on this machine, end to end, in about a minute.

It starts a private Redis, two local Service Bus namespaces, the HTTP ingress, a Celery worker and beat
(all real processes, configured only through ``BRIDGE_*``), then tells a short story and checks it:

1. messages posted over HTTP reach the primary namespace;
2. the primary goes down: the producer still gets 202s, the worker fails over, the roles swap, and the
   messages land in the secondary;
3. both namespaces go down: the outbox holds every message; when they come back, everything is delivered;
4. ``bridge status --json`` shows the roles and availability; nothing was lost (every MessageId accounted
   for exactly once across both namespaces, duplicates reported).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from azure.servicebus import ServiceBusClient, ServiceBusReceiveMode

from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import LocalStack

ENTITY = "orders"
Say = Callable[[str], None]


def run_demo(base_dir: Path | None, messages: int, keep: bool, say: Say) -> bool:
    """Run the story; True when every message was delivered. ``keep`` leaves everything running."""
    base = base_dir or Path(tempfile.mkdtemp(prefix="bridge-demo-"))
    stack = LocalStack(
        base,
        entities={ENTITY: {"replication": "passive", "outbox_shards": 4}},
        settings={"BRIDGE_RETRY__ATTEMPT_DEADLINE": "5", "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.5"},
    )
    say(f"starting Redis and two local Service Bus namespaces in {base}")
    stack.start()
    try:
        stack.start_worker()
        stack.start_beat()
        _, url = stack.start_serve()
        say(f"ingress listening on {url}; worker and beat running")
        sent: list[str] = []
        with httpx.Client(base_url=url, timeout=10) as http:
            sent += _post(http, "healthy", messages)
            got_primary = _drain(stack.primary, len(sent), say=say, label="primary")
            say("taking the PRIMARY namespace down (connections refused)")
            stack.primary.control.outage()
            sent += _post(http, "primary-down", messages)
            got_secondary = _drain(stack.secondary, messages, say=say, label="secondary")
            _show_roles(stack, say)
            say("taking BOTH namespaces down: the outbox keeps everything")
            stack.secondary.control.outage()
            sent += _post(http, "both-down", messages)
            time.sleep(2)
            say(f"outbox depth while both are down: {_status(stack)['outbox_depth']}")
            stack.primary.control.restore()
            stack.secondary.control.restore()
            say("both namespaces restored")
            deadline = time.monotonic() + 60
            recovered: list[str] = []
            while len(recovered) < messages and time.monotonic() < deadline:
                recovered += _drain(stack.primary, 0, say=say, label="primary", quiet=True)
                recovered += _drain(stack.secondary, 0, say=say, label="secondary", quiet=True)
            say(
                f"received {len(recovered)} message(s) after the recovery, from the active namespace"
            )
            got_primary += recovered
        _show_roles(stack, say)
        return _verdict(sent, got_primary + got_secondary, say)
    finally:
        if keep:
            _keep_running(stack, say)
        stack.stop()


def _keep_running(stack: LocalStack, say: Say) -> None:
    """Write the stack's BRIDGE_* settings to a private file and wait for Ctrl-C."""
    env_file = stack.base_dir / "bridge.env"
    env_file.touch(mode=0o600)
    env_file.write_text(
        "".join(f"{k}={v}\n" for k, v in sorted(stack.env().items()) if k.startswith("BRIDGE_"))
    )
    say(f"--keep: everything stays up; its settings (with the local keys) are in {env_file}")
    say("use them with e.g.: set -a; . " + str(env_file) + "; set +a; bridge status   (Ctrl-C here to stop)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        say("stopping")


def _post(http: httpx.Client, phase: str, count: int) -> list[str]:
    ids = []
    for i in range(count):
        answer = http.post(
            f"/v1/entities/{ENTITY}/messages",
            json={"body": f"{phase} #{i}", "application_properties": {"phase": phase}},
        )
        answer.raise_for_status()
        ids.append(answer.json()["message_id"])
    return ids


def _drain(
    ns: LocalNamespace,
    expected: int,
    *,
    say: Say,
    label: str,
    settle: float = 0.5,
    timeout: float = 60.0,
    quiet: bool = False,
) -> list[str]:
    """Receive-and-delete from ``ns`` until ``expected`` arrived; MessageIds received."""
    got: list[str] = []
    deadline = time.monotonic() + timeout
    with (
        ServiceBusClient.from_connection_string(ns.connection_string, retry_total=1) as client,
        client.get_queue_receiver(ENTITY, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as rx,
    ):
        while len(got) < expected and time.monotonic() < deadline:
            got += [
                m.message_id
                for m in rx.receive_messages(max_message_count=100, max_wait_time=1)
                if m.message_id
            ]
        got += [
            m.message_id
            for m in rx.receive_messages(max_message_count=100, max_wait_time=settle)
            if m.message_id
        ]
    if not quiet:
        say(f"received {len(got)} message(s) from the {label} namespace")
    return got


def _status(stack: LocalStack) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli.main", "status", "--json"],
        env=stack.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for item in json.loads(out.stdout)["entities"]:
        if item["name"] == ENTITY:
            return dict(item)
    return {}


def _show_roles(stack: LocalStack, say: Say) -> None:
    status = _status(stack)
    health = {role: "up" if ns["available"] else "DOWN" for role, ns in status["namespaces"].items()}
    say(
        f"bridge status: active={status['active']} primary={health['primary']} "
        f"secondary={health['secondary']} outbox_depth={status['outbox_depth']}"
    )


def _verdict(sent: list[str], received: list[str], say: Say) -> bool:
    missing = set(sent) - set(received)
    duplicates = len(received) - len(set(received))
    say(
        f"sent {len(sent)}, received {len(set(received))} distinct, lost {len(missing)}, "
        f"duplicates (same MessageId) {duplicates}"
    )
    return not missing
