"""``bridge up``: the whole bridge on this machine, left running for you (``bridge demo`` without the story).

Every part is a real process configured only through ``BRIDGE_*`` (``bridge.embedded.stack.LocalStack``):
a private ``redis-server`` with AOF and a random password, two local Service Bus namespaces, the HTTP
ingress (``/v1``, the REST door, ``/status``, ``/metrics``), a prefork send worker, two beats, and a
receiver per entity that logs what it gets (``bridge.embedded.handlers.log_message``). Worker, beats and
receivers serve Prometheus metrics on their own loopback ports.

The settings every process uses are written to ``<data dir>/bridge.env`` (mode 0600; it holds the local
keys and the Redis password), so ``set -a; . <file>; set +a`` gives your shell the same view:
``bridge status``, ``bridge send``, ``bridge emulator-ctl`` (``BRIDGE_EMULATOR_CONTROL_URL`` of each
namespace is in the file too). Ctrl-C (or SIGTERM) stops everything, bridge processes first.

With ``standard_ports=True`` (the CLI's default) the primary also takes SAS over AMQPS on localhost's 5671
and HTTPS on 443 where free, and the env file holds the trust and the ``SERVICEBUS_*`` names the SDK's
samples read (``bridge.embedded.trust``), so an application naming only ``localhost`` and a key connects.

With ``tls=True`` (``bridge up --tls``) the ingress speaks HTTPS only, with a self-signed certificate made
in ``<data dir>/ingress-tls`` (``bridge.emulator.certs``); the env file then also holds its settings and
``BRIDGE_INGRESS_CA_FILE``, the certificate a client trusts (``REQUESTS_CA_BUNDLE``, ``NODE_EXTRA_CA_CERTS``,
``curl --cacert``), for HTTPS-only REST clients.

With ``ha=True`` (``bridge up --ha``) Redis is a primary, a replica and three Sentinels
(``bridge.embedded.sentinel``), every process is given the ``redis+sentinel://`` URL and the deployment runs
``ingress.durability = "replicated"`` with one replica. Kill the primary (``kill -9``, its pid is printed) and
watch: the Sentinels promote the replica within seconds, the processes follow it, and ``wait`` brings the
killed node back after ``HA_RESTART_AFTER`` seconds as a replica of the new primary, as a supervisor would;
until then a replicated write cannot be confirmed and is answered 503.

With ``ledger=True`` (``bridge up --ledger``) the live ledger runs too (``bridge ledger``: Structured
Streaming over the journal the beats roll, ``docs/journal-ledger.md``), its folder ``<data dir>/ledger``;
``bridge status`` and the status page then show its verdict and overdue list. It needs Java, as
``bridge report`` does, and stops with the rest.
"""

from __future__ import annotations

import json
import secrets
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from bridge.embedded.ports import free_port, wait_listening
from bridge.embedded.sentinel import SentinelRedis
from bridge.embedded.stack import LocalStack
from bridge.embedded.trust import sas_shell_env
from bridge.emulator.certs import ensure_certificate
from bridge.errors import EmulatorError

Say = Callable[[str], None]

ENTITIES: dict[str, dict[str, object]] = {
    "orders": {"replication": "passive", "outbox_shards": 2},
    "audit": {"replication": "active"},
    "payments": {"replication": "paired"},
}
"""One entity per replication mode; their queues are created on first use by the local namespaces."""

SETTINGS = {
    # Short enough that an outage caused with `bridge emulator-ctl` shows within seconds.
    "BRIDGE_RETRY__ATTEMPT_DEADLINE": "5",
    "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.5",
    "BRIDGE_PAIRED__FAILOVER_INTERVAL": "5",
    "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "5",
    # A worker's warm shutdown waits for the syphon run in hand, a receiver's for its long-poll: short ones
    # let Ctrl-C stop everything within seconds.
    "BRIDGE_PAIRED__SYPHON_RECEIVE_WAIT": "1",
    "BRIDGE_PAIRED__SYPHON_RUN_BUDGET": "3",
    "BRIDGE_RECEIVER__MAX_WAIT": "1",
    "BRIDGE_LOG_JSON": "false",
}
RECEIVER_HANDLER = "bridge.embedded.handlers:log_message"
HA_SETTINGS = {
    "BRIDGE_INGRESS__DURABILITY": "replicated",
    "BRIDGE_INGRESS__WAIT_REPLICAS": "1",
    "BRIDGE_INGRESS__WAIT_TIMEOUT": "1",
}
LEDGER_DIRECTORY = "BRIDGE_JOURNAL__LIVE_LEDGER__DIRECTORY"
HA_RESTART_AFTER = 5.0
"""Seconds a killed Redis data node of ``bridge up --ha`` stays down before ``wait`` starts it again."""


@dataclass
class Stack:
    """A running ``bridge up``: where everything is."""

    base: Path
    local: LocalStack
    ingress_url: str = ""
    env_file: Path = field(default_factory=Path)
    metrics: dict[str, str] = field(default_factory=dict)
    ingress_ca: Path | None = None
    ledger: Path | None = None


def start(
    base_dir: Path | None,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    concurrency: int = 2,
    receivers: bool = True,
    entities: dict[str, dict[str, object]] | None = None,
    settings: dict[str, str] | None = None,
    on_start: Callable[[Stack], None] | None = None,
    namespace_entities: Path | None = None,
    tls: bool = False,
    entra: bool = False,
    standard_ports: bool = False,
    ha: bool = False,
    ledger: bool = False,
) -> Stack:
    """Start everything; ``settings`` (``BRIDGE_*``) override ``SETTINGS``; ``namespace_entities`` is an
    entities file both local namespaces create at start (other queues are created on first use);
    ``standard_ports``: the primary also takes SAS over AMQPS on 5671 and HTTPS on 443 where free (an
    Entra-only stack always does); ``ha``: Redis under Sentinel with replicated durability; ``ledger``: the
    live ledger as one more process.
    ``on_start`` gets the stack before its processes start, so a caller can stop it even when the start
    fails half-way."""
    base = base_dir or Path(tempfile.mkdtemp(prefix="bridge-up-"))
    local = LocalStack(
        base,
        entities=entities if entities is not None else ENTITIES,
        settings={
            **SETTINGS,
            # The beat rolls the journal into Parquet here; `bridge report --out DIR` reads it.
            "BRIDGE_JOURNAL__DIRECTORY": str(base / "journal"),
            **(HA_SETTINGS if ha else {}),
            **({LEDGER_DIRECTORY: str(base / "ledger")} if ledger else {}),
            **(settings or {}),
        },
        redis_password=secrets.token_urlsafe(18),
        namespace_entities_file=namespace_entities,
        entra=entra,
        standard_ports=standard_ports,
        ha=ha,
    )
    stack = Stack(base, local)
    if on_start is not None:
        on_start(stack)
    local.start()

    def with_metrics(name: str) -> dict[str, str]:
        metrics_port = free_port()
        stack.metrics[name] = f"http://127.0.0.1:{metrics_port}/metrics"
        return {"BRIDGE_METRICS_PORT": str(metrics_port)}

    local.start_worker("worker", concurrency=concurrency, **with_metrics("worker"))
    local.start_beat("beat", **with_metrics("beat"))
    local.start_beat("beat-2", **with_metrics("beat-2"))
    if receivers:
        for entity in local.entities:
            local.start_bridge(
                f"receive-{entity}", "receive", entity, "--handler", RECEIVER_HANDLER, **with_metrics(entity)
            )
    if ledger:
        local.start_bridge("ledger", "ledger")
        stack.ledger = Path(local.env()[LEDGER_DIRECTORY])
    ingress_port = port or free_port(host)
    ingress_env = ingress_tls(stack, host) if tls else {}
    serve = local.start_bridge("serve", "serve", "--host", host, "--port", str(ingress_port), **ingress_env)
    if not wait_listening(host, ingress_port, 30):
        raise EmulatorError(f"bridge serve did not listen on {host}:{ingress_port}: {serve.log_tail()}")
    stack.ingress_url = f"{'https' if tls else 'http'}://{host}:{ingress_port}"
    stack.metrics["ingress"] = f"{stack.ingress_url}/metrics"
    stack.env_file = write_env_file(local, ingress_env)
    return stack


def ingress_tls(stack: Stack, host: str) -> dict[str, str]:
    """A self-signed pair for the ingress; the settings that make ``bridge serve`` use it."""
    pair = ensure_certificate(stack.base / "ingress-tls", host)
    stack.ingress_ca = pair.cert
    return {
        "BRIDGE_INGRESS__TLS_CERTIFICATE": str(pair.cert),
        "BRIDGE_INGRESS__TLS_KEY": str(pair.key),
        "BRIDGE_INGRESS_CA_FILE": str(pair.cert),
    }


def write_env_file(local: LocalStack, extra: dict[str, str] | None = None) -> Path:
    """The processes' ``BRIDGE_*`` settings (and the namespaces' control URLs), readable by you only."""
    path = local.base_dir / "bridge.env"
    path.touch(mode=0o600)
    path.chmod(0o600)
    lines = [f"{k}={_quoted(v)}" for k, v in sorted(local.env().items()) if k.startswith("BRIDGE_")]
    lines += [f"{k}={_quoted(v)}" for k, v in sorted((extra or {}).items())]
    lines += [
        f"BRIDGE_PRIMARY_CONTROL_URL={local.primary.control.url}",
        f"BRIDGE_SECONDARY_CONTROL_URL={local.secondary.control.url}",
    ]
    # For shells and the SDK's own samples (``set -a; . bridge.env``): the certificates, the namespace and how
    # to sign in to it; IDENTITY_HEADER and the client secret are secrets, like the keys.
    shell: dict[str, str] = {}
    if local.entra is not None:
        shell = local.entra.shell_env(local.primary)
    elif local.trust is not None:
        shell = {**local.trust.shell_env(), **sas_shell_env(local.primary)}
    for key, value in shell.items():
        # PYTHONPATH goes in front of the shell's own rather than replacing it.
        keep = '"${PYTHONPATH:+:$PYTHONPATH}"' if key == "PYTHONPATH" else ""
        lines.append(f"{key}={_quoted(value)}{keep}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _quoted(value: str) -> str:
    # Shell-safe for `set -a; . file`: JSON (entities, API keys) and connection strings hold ; and quotes.
    return "'" + value.replace("'", "'\\''") + "'"


def describe(stack: Stack) -> list[str]:
    """What to print once everything runs."""
    local = stack.local
    lines = [
        f"ingress      {stack.ingress_url}  (POST /v1/entities/<entity>/messages)",
        f"status page  {stack.ingress_url}/status",
        *(f"metrics      {url}  ({name})" for name, url in stack.metrics.items()),
        f"entities     {json.dumps(local.entities)}",
        f"data         {stack.base}  (process logs: *.log)",
        f"settings     {stack.env_file}  (holds the local keys and the Redis password; mode 0600)",
        f"use it:      set -a; . {stack.env_file}; set +a; bridge status",
        *(
            [f"https:       trust {stack.ingress_ca} (BRIDGE_INGRESS_CA_FILE in the settings)"]
            if stack.ingress_ca
            else []
        ),
        *(
            [f"ledger       {stack.ledger}  (the live ledger; its verdict in `bridge status`, ledger.log)"]
            if stack.ledger
            else []
        ),
        "outage:      BRIDGE_EMULATOR_CONTROL_URL=$BRIDGE_PRIMARY_CONTROL_URL bridge emulator-ctl outage",
        *ha_lines(local),
        "Ctrl-C stops everything.",
    ]
    endpoints = local.primary.endpoints
    if local.entra is None and local.trust is not None:
        sas = (
            f"SAS over AMQPS on localhost ports {endpoints.amqps_ports} (5671, 443)"
            if endpoints is not None and endpoints.amqps_ports
            else "ports 5671 and 443 were busy: clients need the namespace's own port"
        )
        lines.insert(-1, f"sas          {sas}; SERVICEBUS_* for the SDK's samples in the env file")
    if local.entra is not None:
        amqps = (
            f"also on localhost ports {endpoints.amqps_ports} (AMQPS 5671, HTTPS 443)"
            if endpoints is not None and endpoints.amqps_ports
            else "ports 5671 and 443 were busy: clients need custom_endpoint_address"
        )
        lines.insert(
            -1, f"entra        Entra ID only (SAS refused); managed identity in the env file; {amqps}"
        )
    return lines


def ha_lines(local: LocalStack) -> list[str]:
    """What ``bridge up --ha`` adds to the description: the Redis nodes and how to fail one over."""
    group = local.redis
    if not isinstance(group, SentinelRedis):
        return []
    nodes = ", ".join(f"127.0.0.1:{node.port} (pid {node.pid})" for node in group.nodes)
    sentinels = ", ".join(f"127.0.0.1:{sentinel.port}" for sentinel in group.sentinels)
    primary = group.nodes[0]
    return [
        f"redis        primary and replica {nodes}; Sentinels {sentinels}; durability replicated",
        f"failover:    kill -9 {primary.pid}   (the primary; it comes back as a replica after"
        f" {HA_RESTART_AFTER:g} s; watch `bridge status` or the status page)",
    ]


def revive(stack: Stack, say: Say, down_since: dict[int, float], now: float) -> None:
    """Under ``--ha``, start a Redis data node again ``HA_RESTART_AFTER`` s after it was found dead."""
    group = stack.local.redis
    if not isinstance(group, SentinelRedis):
        return
    for node in group.nodes:
        if node.running:
            down_since.pop(node.port, None)
            continue
        since = down_since.setdefault(node.port, now)
        if now - since >= HA_RESTART_AFTER:
            say(f"redis node 127.0.0.1:{node.port} was down; starting it again as a replica")
            group.restart_node(node)
            down_since.pop(node.port, None)


def wait(stack: Stack, say: Say, poll: float = 1.0) -> int:
    """Block until SIGINT/SIGTERM (0) or until a bridge process died (1, after saying which)."""
    stopping = {"now": False}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping["now"] = True

    previous = signal.signal(signal.SIGTERM, on_signal)
    down_since: dict[int, float] = {}
    try:
        while not stopping["now"]:
            revive(stack, say, down_since, time.monotonic())
            dead = [p for p in stack.local.processes if not p.running]
            if dead:
                for proc in dead:
                    say(f"{proc.name} exited with status {proc.proc.returncode}; its log: {proc.log_path}")
                return 1
            time.sleep(poll)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def stop(stack: Stack) -> None:
    """Stop every process (bridge processes first, all asked at once); the data directory stays."""
    stack.local.stop()
