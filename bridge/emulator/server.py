"""The local Service Bus process: one namespace on one port, plus a fault-control port.

One listening socket serves both protocols the SDK uses: the first byte of a connection tells a TLS
ClientHello (0x16, the HTTPS management endpoint of ``ServiceBusAdministrationClient``) from an AMQP
header (``A``), so a stock connection string works for sending, receiving and administration alike. The
control interface (plain HTTP, loopback) switches faults on and off:

- ``outage``: every connection is dropped and the listening socket closed (connects are refused);
- ``blackhole``: TCP is accepted but nothing is ever read or answered — the SDK then hangs in its SASL
  handshake with no timeout (see ``docs/servicebus-sdk.md``), which is what callers must defend against;
- ``busy``/``stall`` and per-entity faults act inside the AMQP handling;
- ``disaster`` drops every entity and message (and the on-disk log).

Everything runs on one asyncio thread, so the broker model needs no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.emulator.amqp.broker import Broker
from bridge.emulator.amqp.codec import with_application_properties
from bridge.emulator.amqp.connection import AmqpConnection
from bridge.emulator.amqp.idle import IdleTimeouts
from bridge.emulator.amqp.tls import TlsSniffer
from bridge.emulator.certs import ensure_certificate, server_ssl_context
from bridge.emulator.entities_file import load_entities
from bridge.emulator.errors import BrokerError
from bridge.emulator.faults import FaultChange, FaultKind, FaultState
from bridge.emulator.http.admin import make_admin_app
from bridge.emulator.http.control import make_control_app
from bridge.emulator.http.server import serve_http
from bridge.emulator.identity.grants import AuthPolicy
from bridge.emulator.identity.keys import ensure_issuer_key
from bridge.emulator.identity.service import IdentityService
from bridge.emulator.model import persistence
from bridge.emulator.model.descriptions import EntityDescription, EntityKind, RuleDescription
from bridge.emulator.model.namespace import Namespace
from bridge.emulator.wal import WriteAheadLog
from bridge.errors import EmulatorError

log = logging.getLogger(__name__)

TICK_SECONDS = 0.05
WAL_FILE = "namespace.wal"


@dataclass
class EmulatorConfig:
    """How to run one local namespace."""

    name: str = "primary"
    host: str = "127.0.0.1"
    port: int = 0
    control_port: int = 0
    key_name: str = "RootManageSharedAccessKey"
    key: str = "local-emulator-key"
    data_dir: Path | None = None
    cert_dir: Path | None = None
    entities: list[EntityDescription] = field(default_factory=list)
    entities_file: Path | None = None
    auto_create: bool = False
    fsync: bool = True
    # Entra ID (``identity/``): refuse SAS; trust the issuer key in ``identity_dir``; run the issuer for the
    # identities of ``identities_file`` on ``identity_port`` (HTTP) and ``authority_port`` (HTTPS).
    disable_local_auth: bool = False
    identity_dir: Path | None = None
    identities_file: Path | None = None
    identity_port: int = 0
    authority_port: int = 0
    # More ports for AMQPS/HTTPS/WebSockets: 5671 (AMQPS) and 443 (HTTPS, WebSockets) let a client built
    # from a host name connect unchanged. Each is bound where free, skipped otherwise.
    amqps_ports: tuple[int, ...] = ()
    idle_timeouts: IdleTimeouts = field(default_factory=IdleTimeouts)


class EmulatorServer:
    """Owns the sockets, the broker and the persistence of one namespace."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.namespace = Namespace(
            config.name, auto_create=config.auto_create, properties_writer=with_application_properties
        )
        self.faults = FaultState()
        self.wal: WriteAheadLog | None = None
        if config.data_dir is not None:
            config.data_dir.mkdir(parents=True, exist_ok=True)
            self.wal = WriteAheadLog(config.data_dir / WAL_FILE, fsync=config.fsync)
        cert_dir = config.cert_dir or (config.data_dir / "tls" if config.data_dir else None)
        if cert_dir is None:
            import tempfile

            cert_dir = Path(tempfile.mkdtemp(prefix=f"bridge-emulator-{config.name}-"))
        self.cert = ensure_certificate(cert_dir, config.host)
        identity_dir = config.identity_dir
        if identity_dir is None and config.identities_file is not None:
            identity_dir = cert_dir.parent / "identity"
        issuer_key = ensure_issuer_key(identity_dir) if identity_dir is not None else None
        self.auth = AuthPolicy(
            {config.key_name: config.key}, local_auth=not config.disable_local_auth, issuer=issuer_key
        )
        self.identity: IdentityService | None = None
        if issuer_key is not None and identity_dir is not None and config.identities_file is not None:
            self.identity = IdentityService(issuer_key, config.identities_file, identity_dir)
        self.broker = Broker(self.namespace, self.faults, self.auth, self.wal)
        self.broker.idle_timeouts = config.idle_timeouts
        self.ssl_context: ssl.SSLContext = server_ssl_context(self.cert.cert, self.cert.key)
        self._listener: socket.socket | None = None
        self._amqps_listeners: list[socket.socket] = []
        self._accept_task: asyncio.Task[None] | None = None
        self._control_server: asyncio.Server | None = None
        self._parked: list[socket.socket] = []
        self._http_tasks: set[asyncio.Task[None]] = set()
        self.port = config.port
        self.control_port = config.control_port
        self.started_at = time.time()

    # ---- lifecycle ---------------------------------------------------------------------------------
    def recover(self) -> None:
        """Replay the write-ahead log and compact it; then create entities declared at start."""
        if self.wal is not None:
            count = 0
            for record in self.wal.replay():
                persistence.apply_record(self.namespace, *record)
                count += 1
            self.wal.rewrite(list(persistence.snapshot(self.namespace)))
            log.info("namespace %s recovered from %d log records", self.config.name, count)
            self.namespace.set_journal(self.wal.append)
        declared = list(self.config.entities)
        if self.config.entities_file is not None:
            declared.extend(load_entities(self.config.entities_file))
        now = time.time()
        created: set[str] = set()
        for desc in declared:
            try:
                self.namespace.create(desc, now)
            except BrokerError as exc:
                if exc.http_status != 409:
                    raise EmulatorError(f"cannot create declared entity {desc.name!r}: {exc}") from None
                continue
            if isinstance(desc, RuleDescription):
                created.add(f"{desc.topic_name}/Subscriptions/{desc.subscription_name}")
        for sub_path in created:
            declared_default = any(
                isinstance(d, RuleDescription)
                and d.name.lower() == "$default"
                and f"{d.topic_name}/Subscriptions/{d.subscription_name}" == sub_path
                for d in declared
            )
            if not declared_default:
                with contextlib.suppress(BrokerError):
                    self.namespace.delete(EntityKind.RULE, f"{sub_path}/Rules/$Default")
        if self.wal is not None:
            self.wal.flush()

    async def start(self) -> None:
        """Recover, bind both ports, start accepting and ticking."""
        self.recover()
        self._open_listener()
        control_app = make_control_app(self)
        self._control_server = await asyncio.start_server(
            lambda r, w: serve_http(r, w, control_app), self.config.host, self.control_port or 0
        )
        self.control_port = self._control_server.sockets[0].getsockname()[1]
        for port in self.config.amqps_ports:
            try:
                listener = _listen(self.config.host, port)
            except OSError as exc:  # "where free": another namespace (or program) may hold it
                log.warning("not serving AMQPS/HTTPS on port %d: %s", port, exc.strerror)
                continue
            self._amqps_listeners.append(listener)
            asyncio.get_running_loop().create_task(self._accept_loop(listener))
        if self.identity is not None:
            await self.identity.start(
                self.config.host, self.config.identity_port, self.config.authority_port, self.ssl_context
            )
        self.faults.subscribe(self._on_fault_change)
        asyncio.get_running_loop().create_task(self._ticker())

    def _open_listener(self) -> None:
        sock = _listen(self.config.host, self.port)
        self.port = sock.getsockname()[1]
        self._listener = sock
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_loop(sock))

    def _close_listener(self) -> None:
        if self._accept_task is not None:
            self._accept_task.cancel()
            self._accept_task = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                self.broker.tick()
            except Exception:
                log.exception("tick failed")

    # ---- connections ---------------------------------------------------------------------------------
    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except (OSError, asyncio.CancelledError):
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            fault = self.faults.for_namespace()
            if fault is not None and fault.kind is FaultKind.BLACKHOLE:
                self._parked.append(sock)  # accepted, never read, never answered
                continue
            task = loop.create_task(self._classify(sock))
            self._http_tasks.add(task)
            task.add_done_callback(self._http_tasks.discard)

    async def _classify(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            first = await asyncio.wait_for(_peek(loop, sock), timeout=30)
        except (TimeoutError, OSError):
            sock.close()
            return
        if not first:
            sock.close()
            return
        if first[0] == 0x16:
            await self._serve_tls(sock)
            return
        await loop.connect_accepted_socket(lambda: AmqpConnection(self.broker), sock)

    async def _serve_tls(self, sock: socket.socket) -> None:
        # AMQPS and HTTPS share the port: the first bytes inside TLS decide (``amqp/tls.py``).
        loop = asyncio.get_running_loop()
        app = self._admin_app()
        sniffer = TlsSniffer(
            lambda: AmqpConnection(self.broker), lambda reader, writer: serve_http(reader, writer, app)
        )
        try:
            await loop.connect_accepted_socket(lambda: sniffer, sock, ssl=self.ssl_context)
        except (ssl.SSLError, OSError):
            sock.close()

    def _admin_app(self) -> Any:
        authority = f"{self.config.host}:{self.port}"
        return make_admin_app(
            self.namespace,
            self.auth,
            lambda request: f"https://{request.headers.get('host') or authority}",
            time.time,
            name=self.config.name,
        )

    # ---- faults --------------------------------------------------------------------------------------
    def _on_fault_change(self, change: FaultChange) -> None:
        started = {f.kind for f in change.started if f.entity is None}
        ended = {f.kind for f in change.ended if f.entity is None}
        if FaultKind.OUTAGE in started or FaultKind.BLACKHOLE in started:
            if FaultKind.OUTAGE in started:
                self._close_listener()
            for conn in list(self.broker.connections):
                conn.abort()
        still = self.faults.for_namespace()
        if (
            FaultKind.OUTAGE in ended
            and self._listener is None
            and (still is None or still.kind is not FaultKind.OUTAGE)
        ):
            self._open_listener()
        if FaultKind.BLACKHOLE in ended:
            for sock in self._parked:
                with contextlib.suppress(OSError):
                    sock.close()
            self._parked.clear()
            for conn in list(self.broker.connections):
                conn.abort()
        if FaultKind.THROTTLE in started or FaultKind.THROTTLE in ended:
            self.broker.penalty.until = 0.0  # a new or cleared throttle starts without a window
        for fault in change.started:
            if fault.entity is not None and fault.kind is FaultKind.OUTAGE:
                self._detach_entity_links(fault.entity)
        self.broker.after_io()

    def _detach_entity_links(self, entity: str) -> None:
        for conn in list(self.broker.connections):
            conn.detach_entity(entity)

    # ---- control interface (NamespaceControl) --------------------------------------------------------
    def detach(self, entity: str | None = None) -> int:
        """Force-detach the entity links of ``entity`` (and below), or of every entity; returns how many."""
        detached = sum(conn.force_detach(entity) for conn in list(self.broker.connections))
        self.broker.after_io()
        return detached

    def disaster(self) -> None:
        """Lose every entity and message, including what is on disk."""
        self.namespace.disaster()
        if self.wal is not None:
            self.wal.flush()
            self.wal.rewrite([])
        for conn in list(self.broker.connections):
            conn.abort()

    def status(self) -> dict[str, Any]:
        """A JSON-able summary for ``GET /status``."""
        ns = self.namespace
        return {
            "name": self.config.name,
            "port": self.port,
            "queues": len(ns.queues),
            "topics": len(ns.topics),
            "messages": sum(len(s.messages) for s in ns.stores()),
            "connections": len(self.broker.connections),
            "faults": self.faults.snapshot(),
            "persistent": self.wal is not None,
            "uptime_seconds": round(time.time() - self.started_at, 3),
        }

    def info(self) -> dict[str, str]:
        """What clients need: the connection string, management endpoint, certificate and control URL."""
        host = self.config.host if self.config.host not in ("0.0.0.0", "") else "127.0.0.1"  # noqa: S104
        info = {
            "connection_string": (
                f"Endpoint=sb://{host}:{self.port};SharedAccessKeyName={self.config.key_name};"
                f"SharedAccessKey={self.config.key};UseDevelopmentEmulator=true"
            ),
            "management_endpoint": f"https://{host}:{self.port}",
            "certificate": str(self.cert.cert),
            "control_url": f"http://{host}:{self.control_port}",
        }
        if self._amqps_listeners:
            info["amqps_ports"] = ",".join(str(s.getsockname()[1]) for s in self._amqps_listeners)
        if self.identity is not None:
            info.update(self.identity.info(host))
        return info

    def close(self) -> None:
        """Stop accepting and flush the log."""
        self._close_listener()
        for listener in self._amqps_listeners:
            listener.close()
        if self.identity is not None:
            self.identity.close()
        if self._control_server is not None:
            self._control_server.close()
        for conn in list(self.broker.connections):
            conn.abort()
        if self.wal is not None:
            self.wal.close()


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    sock.setblocking(False)
    return sock


async def _peek(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """The first byte a client sends, left in the socket for whoever reads next."""
    while True:
        try:
            return sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(sock.fileno(), _set_ready, ready)
            try:
                await ready
            finally:
                loop.remove_reader(sock.fileno())


def _set_ready(ready: asyncio.Future[None]) -> None:
    # The reader may fire again before the awaiting task runs and removes it.
    if not ready.done():
        ready.set_result(None)


async def run(config: EmulatorConfig, json_output: bool = False) -> None:
    """Start a namespace, print how to reach it, serve until cancelled."""
    server = EmulatorServer(config)
    await server.start()
    info = server.info()
    if json_output:
        print(json.dumps(info), flush=True)
    else:
        print(f"local Service Bus namespace {config.name!r}", flush=True)
        for key, value in info.items():
            print(f"  {key}: {value}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        server.close()
