"""A local stack on Microsoft Entra ID only (``bridge up --entra``): one issuer, local auth disabled.

The primary namespace runs the token issuer (``bridge emulator --identities``) and both namespaces trust
its key (``--identity-dir``) and refuse SAS (``--disable-local-auth``). Identities, written with fresh
secrets into ``<data dir>/identity/identities.toml`` (mode 0600):

- ``bridge``: Data Owner, the system-assigned managed identity every bridge process signs in as
  (``credential = "managed_identity"`` through ``IDENTITY_ENDPOINT``/``IDENTITY_HEADER``);
- ``sender`` and ``receiver``: Data Sender and Data Receiver with client secrets, for trying what a
  role-limited identity may do.

The primary also serves AMQPS on 5671 and HTTPS (management, AMQP over WebSockets) on 443 where those
ports are free on loopback, so a client built as ``ServiceBusClient("localhost", DefaultAzureCredential())``
or ``ServiceBusAdministrationClient("localhost", ...)`` reaches it unchanged. Each namespace has its own
self-signed certificate; ``ca-bundle.pem`` holds both (after the system's CA bundle, so other HTTPS keeps
working in a shell that sources the env file) and is what ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE`` and the
namespaces' ``certificate`` setting name. The SDK reads neither variable for AMQPS (it pins certifi's
bundle), so the env file also puts ``python-trust/`` on ``PYTHONPATH``: its ``sitecustomize`` points
``certifi.where()`` at the same bundle, for unmodified applications such as the SDK's samples.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from bridge.embedded.namespaces import LocalNamespace

AMQPS_PORT = 5671
HTTPS_PORT = 443
SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
FQNS = "localhost"


@dataclass
class EntraSetup:
    """Files and emulator options of an Entra-only stack under ``base``."""

    base: Path
    secrets: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.identity_dir = self.base / "identity"
        self.identities_file = self.identity_dir / "identities.toml"
        self.bundle = self.base / "ca-bundle.pem"

    def write_identities(self) -> Path:
        """The identities file with fresh secrets (readable by the owner only)."""
        self.identity_dir.mkdir(parents=True, exist_ok=True)
        self.secrets = {"sender": secrets.token_urlsafe(24), "receiver": secrets.token_urlsafe(24)}
        self.identities_file.touch(mode=0o600)
        self.identities_file.chmod(0o600)
        self.identities_file.write_text(
            '[identities.bridge]\nroles = ["owner"]\nsystem_assigned = true\n'
            f'[identities.sender]\nroles = ["sender"]\nsecret = "{self.secrets["sender"]}"\n'
            f'[identities.receiver]\nroles = ["receiver"]\nsecret = "{self.secrets["receiver"]}"\n'
        )
        return self.identities_file

    def primary_args(self) -> tuple[str, ...]:
        """``bridge emulator`` options of the primary: the issuer, trust, no SAS, and 5671 when free."""
        args = ("--identities", str(self.write_identities()), *self.secondary_args())
        return (*args, "--amqps-port", str(AMQPS_PORT), "--amqps-port", str(HTTPS_PORT))

    def secondary_args(self) -> tuple[str, ...]:
        """``bridge emulator`` options of the secondary: trust the issuer's key, no SAS."""
        return ("--identity-dir", str(self.identity_dir), "--disable-local-auth")

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
        (folder / "sitecustomize.py").write_text(
            '"""Written by `bridge up --entra`: trust the local namespaces through certifi."""\n'
            "import os\n\n"
            "try:\n"
            "    import certifi\n"
            "except ImportError:\n"
            "    certifi = None\n"
            "_BUNDLE = os.environ.get('SSL_CERT_FILE')\n"
            "if certifi is not None and _BUNDLE:\n"
            "    certifi.where = lambda: _BUNDLE\n"
        )
        return folder

    def bridge_env(self, primary: LocalNamespace, secondary: LocalNamespace) -> dict[str, str]:
        """Every process's environment: both namespaces by name with the managed identity, the issuer."""
        env: dict[str, str] = {}
        for role, ns in (("PRIMARY", primary), ("SECONDARY", secondary)):
            env.update(
                {
                    f"BRIDGE_{role}__FULLY_QUALIFIED_NAMESPACE": FQNS,
                    f"BRIDGE_{role}__CREDENTIAL": "managed_identity",
                    f"BRIDGE_{role}__CUSTOM_ENDPOINT_ADDRESS": f"sb://{FQNS}:{ns.port}",
                    f"BRIDGE_{role}__MANAGEMENT_ENDPOINT": f"https://{FQNS}:{ns.port}",
                    f"BRIDGE_{role}__CERTIFICATE": str(self.bundle),
                    f"BRIDGE_{role}__NAME": ns.name,
                }
            )
        endpoints = primary.endpoints
        assert endpoints is not None and endpoints.identity_endpoint and endpoints.identity_header
        env.update(
            {
                "IDENTITY_ENDPOINT": endpoints.identity_endpoint,
                "IDENTITY_HEADER": endpoints.identity_header,
                "SSL_CERT_FILE": str(self.bundle),
                "REQUESTS_CA_BUNDLE": str(self.bundle),
            }
        )
        return env

    def shell_env(self, primary: LocalNamespace) -> dict[str, str]:
        """What a shell (and the SDK's samples) needs beyond ``BRIDGE_*``: issuer, certificates, namespace."""
        endpoints = primary.endpoints
        assert endpoints is not None and endpoints.identity_endpoint and endpoints.identity_header
        served = str(AMQPS_PORT) in (endpoints.amqps_ports or "").split(",")
        namespace = FQNS if served else f"{FQNS}:{primary.port}"
        return {
            "IDENTITY_ENDPOINT": endpoints.identity_endpoint,
            "IDENTITY_HEADER": endpoints.identity_header,
            "SSL_CERT_FILE": str(self.bundle),
            "REQUESTS_CA_BUNDLE": str(self.bundle),
            "PYTHONPATH": str(self.write_certifi_override()),
            "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": namespace,
        }
