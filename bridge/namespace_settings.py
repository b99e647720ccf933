"""One Service Bus namespace's settings: where it is, how to sign in, how AMQP reaches it.

Part of the one settings model (``bridge/settings.py`` re-exports everything here; ``Settings.primary`` and
``Settings.secondary`` are of this type). Kept apart because the sign-in rules (a SAS connection string or a
Microsoft Entra ID credential, transport, proxy, custom endpoint) are a model of their own, with their own
checks; docs/settings.md documents every field.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

CredentialKind = Literal[
    "default", "managed_identity", "workload_identity", "client_secret", "certificate", "azure_cli"
]
# Fields each credential kind cannot do without (the others come from the environment when unset, as
# azure-identity reads AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_FEDERATED_TOKEN_FILE).
_CREDENTIAL_NEEDS: dict[str, tuple[str, ...]] = {
    "default": (),
    "managed_identity": (),
    "workload_identity": (),
    "client_secret": ("tenant_id", "client_id", "client_secret"),
    "certificate": ("tenant_id", "client_id", "client_certificate"),
    "azure_cli": (),
}


class NamespaceSettings(BaseModel):
    """One Service Bus namespace: where it is, how to sign in and how to reach it.

    Sign in either with ``connection_string`` (SAS) or with ``fully_qualified_namespace`` and a Microsoft
    Entra ID ``credential`` (``bridge/servicebus/credentials.py`` builds it; docs/settings.md lists what
    each kind needs). ``transport``, ``proxy`` and ``custom_endpoint_address`` say how AMQP travels.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    connection_string: SecretStr | None = None
    fully_qualified_namespace: str | None = None
    credential: CredentialKind | None = None
    client_id: str | None = None
    tenant_id: str | None = None
    client_secret: SecretStr | None = None
    client_certificate: Path | None = None
    token_file: Path | None = None
    authority: str | None = None
    transport: Literal["amqp", "amqp_websocket"] = "amqp"
    proxy: SecretStr | None = None
    custom_endpoint_address: str | None = None
    management_endpoint: str | None = None
    certificate: Path | None = None
    name: str | None = Field(
        default=None, description="Namespace name for backlog paths; default: first label of the host."
    )

    @field_validator("connection_string")
    @classmethod
    def _well_formed(cls, value: SecretStr | None) -> SecretStr | None:
        # Messages name the missing part only; the value itself is never echoed (it holds the key).
        if value is None:
            return None
        parts = parse_connection_string(value.get_secret_value())
        if "endpoint" not in parts:
            raise ValueError("connection string has no Endpoint=sb://... part")
        if not parts["endpoint"].startswith("sb://"):
            raise ValueError("connection string Endpoint must start with sb://")
        if not parts["endpoint"].removeprefix("sb://").strip("/"):
            raise ValueError("connection string Endpoint has no host")
        has_key = "sharedaccesskeyname" in parts and "sharedaccesskey" in parts
        if not has_key and "sharedaccesssignature" not in parts:
            raise ValueError(
                "connection string needs SharedAccessKeyName and SharedAccessKey, or SharedAccessSignature"
            )
        return value

    @field_validator("proxy")
    @classmethod
    def _proxy_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        text = value.get_secret_value()
        if not text.startswith("http://") or not urlsplit(text).hostname or urlsplit(text).port is None:
            raise ValueError("proxy must be http://[user:password@]host:port")
        return value

    @model_validator(mode="after")
    def _one_way_to_sign_in(self) -> NamespaceSettings:
        if (self.connection_string is None) == (self.fully_qualified_namespace is None):
            raise ValueError("set either connection_string or fully_qualified_namespace (with credential)")
        if self.connection_string is not None and self.credential is not None:
            raise ValueError("credential applies to fully_qualified_namespace, not to connection_string")
        if self.fully_qualified_namespace is not None:
            missing = [f for f in _CREDENTIAL_NEEDS[self.credential or "default"] if getattr(self, f) is None]
            if missing:
                raise ValueError(f"credential {self.credential!r} needs {', '.join(missing)}")
        return self

    @property
    def endpoint_host(self) -> str:
        """``host[:port]`` of the AMQP endpoint (no secret in it)."""
        if self.fully_qualified_namespace is not None:
            return self.fully_qualified_namespace.split("://", 1)[-1].rstrip("/")
        assert self.connection_string is not None  # the validator guarantees one of the two
        endpoint = parse_connection_string(self.connection_string.get_secret_value())["endpoint"]
        return endpoint.removeprefix("sb://").rstrip("/")

    @property
    def credential_kind(self) -> CredentialKind | None:
        """The Entra ID credential in use (``default`` when only the namespace is named), or None for SAS."""
        if self.fully_qualified_namespace is None:
            return None
        return self.credential or "default"

    @property
    def namespace_name(self) -> str:
        """The configured name, else derived from the endpoint host.

        A DNS host gives its first label (``ns1`` of ``ns1.servicebus.windows.net``). A loopback or IP
        endpoint (the local Service Bus) has no such label, and two namespaces on one machine differ only
        by port, so the name is host and port with separators as dashes (``127-0-0-1-5671``); set ``name``
        explicitly when the port is not stable.
        """
        if self.name:
            return self.name
        host, port = _split_host_port(self.endpoint_host)
        if host == "localhost" or _is_ip(host):
            return re.sub(r"[^A-Za-z0-9]+", "-", f"{host}-{port}" if port else host).strip("-")
        return host.split(".", 1)[0]


def parse_connection_string(value: str) -> dict[str, str]:
    """Split ``Key=Value;...`` into a dict with lower-cased keys (values untouched)."""
    parts: dict[str, str] = {}
    for item in value.split(";"):
        if not item.strip():
            continue
        key, sep, val = item.partition("=")
        if not sep:
            raise ValueError("connection string part without '='")
        parts[key.strip().lower()] = val.strip()
    return parts


def _split_host_port(endpoint_host: str) -> tuple[str, str]:
    """``("host", "port")`` of ``host[:port]``, IPv6 brackets removed; port is ``""`` when absent."""
    if endpoint_host.startswith("["):
        host, _, rest = endpoint_host[1:].partition("]")
        return host, rest.removeprefix(":")
    host, _, port = endpoint_host.partition(":")
    return host, port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
