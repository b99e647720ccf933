"""A local stack on Microsoft Entra ID only (``bridge up --entra``): one issuer, local auth disabled.

The primary namespace runs the token issuer (``bridge emulator --identities``) and both namespaces trust
its key (``--identity-dir``) and refuse SAS (``--disable-local-auth``). Identities, written with fresh
secrets into ``<data dir>/identity/identities.toml`` (mode 0600):

- ``bridge``: Data Owner, the system-assigned managed identity every bridge process signs in as
  (``credential = "managed_identity"`` through ``IDENTITY_ENDPOINT``/``IDENTITY_HEADER``);
- ``app``: Data Owner with a client secret, the registered client the env file names for
  ``EnvironmentCredential`` (``AZURE_TENANT_ID``, ``AZURE_CLIENT_ID``, ``AZURE_CLIENT_SECRET``,
  ``AZURE_AUTHORITY_HOST``);
- ``sender`` and ``receiver``: Data Sender and Data Receiver with client secrets, for trying what a
  role-limited identity may do.

``AZURE_TENANT_ID`` is ``adfs``: the issuer also answers as an AD FS authority
(``bridge/emulator/identity/issuer.py``), and msal skips its instance discovery (a call to Entra ID itself)
for one. So the synchronous ``EnvironmentCredential`` signs in too, and so does ``DefaultAzureCredential``,
which tries ``EnvironmentCredential`` first and stops at its first configured credential that fails.

The primary also serves AMQPS on 5671 and HTTPS (management, AMQP over WebSockets) on 443 where those
ports are free, with the certificate trust of ``bridge.embedded.trust``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.trust import FQNS, STANDARD_PORT_ARGS, LocalTrust, namespace_name
from bridge.emulator.identity.directory import default_client_id
from bridge.emulator.identity.issuer import ADFS

APP = "app"
"""The registered client the env file names for ``EnvironmentCredential``."""


@dataclass
class EntraSetup:
    """Files and emulator options of an Entra-only stack under ``base``."""

    base: Path
    secrets: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.identity_dir = self.base / "identity"
        self.identities_file = self.identity_dir / "identities.toml"
        self.trust = LocalTrust(self.base)
        self.bundle = self.trust.bundle

    def write_identities(self) -> Path:
        """The identities file with fresh secrets (readable by the owner only)."""
        self.identity_dir.mkdir(parents=True, exist_ok=True)
        self.secrets = {name: secrets.token_urlsafe(24) for name in (APP, "sender", "receiver")}
        self.identities_file.touch(mode=0o600)
        self.identities_file.chmod(0o600)
        self.identities_file.write_text(
            '[identities.bridge]\nroles = ["owner"]\nsystem_assigned = true\n'
            f'[identities.{APP}]\nroles = ["owner"]\nsecret = "{self.secrets[APP]}"\n'
            f'[identities.sender]\nroles = ["sender"]\nsecret = "{self.secrets["sender"]}"\n'
            f'[identities.receiver]\nroles = ["receiver"]\nsecret = "{self.secrets["receiver"]}"\n'
        )
        return self.identities_file

    def primary_args(self) -> tuple[str, ...]:
        """``bridge emulator`` options of the primary: the issuer, trust, no SAS, and 5671 when free."""
        return ("--identities", str(self.write_identities()), *self.secondary_args(), *STANDARD_PORT_ARGS)

    def secondary_args(self) -> tuple[str, ...]:
        """``bridge emulator`` options of the secondary: trust the issuer's key, no SAS."""
        return ("--identity-dir", str(self.identity_dir), "--disable-local-auth")

    def write_bundle(self, *namespaces: LocalNamespace) -> Path:
        """The system CAs plus every namespace's certificate, in one PEM file."""
        return self.trust.write_bundle(*namespaces)

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
        """What a shell (and the SDK's samples) needs beyond ``BRIDGE_*``: issuer, client, trust, name."""
        endpoints = primary.endpoints
        assert endpoints is not None and endpoints.identity_endpoint and endpoints.identity_header
        assert endpoints.authority
        return {
            "IDENTITY_ENDPOINT": endpoints.identity_endpoint,
            "IDENTITY_HEADER": endpoints.identity_header,
            "AZURE_TENANT_ID": ADFS,
            "AZURE_CLIENT_ID": default_client_id(APP),
            "AZURE_CLIENT_SECRET": self.secrets[APP],
            "AZURE_AUTHORITY_HOST": endpoints.authority,
            **self.trust.shell_env(),
            "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": namespace_name(primary),
        }
