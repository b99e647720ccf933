"""The local namespaces on the SDK's standard ports, and the certificate trust that lets clients reach them.

Over AMQPS the SDKs dial port 5671 whatever port a namespace names, and the administration clients 443, so
a client built as ``ServiceBusClient("localhost", credential)`` reaches a local namespace only when that
namespace also listens there (``bridge emulator --amqps-port``, where the port is free on loopback). Each
namespace has its own self-signed certificate; ``<data dir>/ca-bundle.pem`` holds both (after the system's
CA bundle, so other HTTPS keeps working in a shell that sources the env file) and is what
``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE`` and ``NODE_EXTRA_CA_CERTS`` name. The Python SDK reads none of
them for AMQPS (it pins certifi's bundle), so the env file also puts ``python-trust/`` on ``PYTHONPATH``:
its ``sitecustomize`` points ``certifi.where()`` at the same bundle, for unmodified applications such as
the SDK's samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bridge.embedded.namespaces import LocalNamespace

AMQPS_PORT = 5671
HTTPS_PORT = 443
STANDARD_PORT_ARGS = ("--amqps-port", str(AMQPS_PORT), "--amqps-port", str(HTTPS_PORT))
"""``bridge emulator`` options of a namespace that also serves the SDK's standard ports where free."""
SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
FQNS = "localhost"

_SITECUSTOMIZE = (
    '"""Written by `bridge up`: trust the local namespaces through certifi."""\n'
    "import os\n\n"
    "try:\n"
    "    import certifi\n"
    "except ImportError:\n"
    "    certifi = None\n"
    "_BUNDLE = os.environ.get('SSL_CERT_FILE')\n"
    "if certifi is not None and _BUNDLE:\n"
    "    certifi.where = lambda: _BUNDLE\n"
)


@dataclass
class LocalTrust:
    """The CA bundle and the certifi override of a stack under ``base``."""

    base: Path

    @property
    def bundle(self) -> Path:
        """``<base>/ca-bundle.pem``."""
        return self.base / "ca-bundle.pem"

    def write_bundle(self, *namespaces: LocalNamespace) -> Path:
        """The system CAs plus every namespace's certificate, in one PEM file."""
        parts = [SYSTEM_BUNDLE.read_text()] if SYSTEM_BUNDLE.is_file() else []
        parts += [Path(ns.certificate).read_text() for ns in namespaces]
        self.bundle.write_text("\n".join(parts))
        return self.bundle

    def write_certifi_override(self) -> Path:
        """A ``sitecustomize`` pointing ``certifi.where()`` at the bundle; its folder goes on PYTHONPATH.

        The SDK verifies AMQPS and WebSockets against ``certifi.where()`` unless the application passes
        ``connection_verify`` (``docs/servicebus-sdk.md``), and no environment variable changes that; this is
        the one way an unmodified application (the SDK's samples) trusts the local namespaces.
        """
        folder = self.base / "python-trust"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        return folder

    def shell_env(self) -> dict[str, str]:
        """What a shell needs to trust the namespaces: the bundle for Python, requests, Node, and certifi."""
        return {
            "SSL_CERT_FILE": str(self.bundle),
            "REQUESTS_CA_BUNDLE": str(self.bundle),
            "NODE_EXTRA_CA_CERTS": str(self.bundle),
            "PYTHONPATH": str(self.write_certifi_override()),
        }


def serves_standard_ports(ns: LocalNamespace) -> bool:
    """Whether the namespace could bind port 5671 (the SDK's AMQPS port)."""
    endpoints = ns.endpoints
    return endpoints is not None and str(AMQPS_PORT) in (endpoints.amqps_ports or "").split(",")


def namespace_name(ns: LocalNamespace) -> str:
    """``localhost`` when the namespace serves 5671, else ``localhost:<its port>``."""
    return FQNS if serves_standard_ports(ns) else f"{FQNS}:{ns.port}"


def sas_shell_env(ns: LocalNamespace) -> dict[str, str]:
    """The SAS variables the SDK's samples read, for a namespace that allows SAS.

    ``SERVICEBUS_CONNECTION_STR`` names ``sb://localhost`` (AMQPS on 5671) when the namespace serves 5671,
    else the namespace's own connection string (plain AMQP on its port, ``UseDevelopmentEmulator=true``).
    """
    fields = dict(part.split("=", 1) for part in ns.connection_string.split(";") if "=" in part)
    policy, key = fields["SharedAccessKeyName"], fields["SharedAccessKey"]
    standard = f"Endpoint=sb://{FQNS}/;SharedAccessKeyName={policy};SharedAccessKey={key}"
    return {
        "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": namespace_name(ns),
        "SERVICEBUS_SAS_POLICY": policy,
        "SERVICEBUS_SAS_KEY": key,
        "SERVICEBUS_CONNECTION_STR": standard if serves_standard_ports(ns) else ns.connection_string,
    }
