"""The one settings model.

Sources, strongest first: keyword arguments, environment variables (``BRIDGE_`` prefix, ``__`` between
nested names: ``BRIDGE_PRIMARY__CONNECTION_STRING``), the TOML file named by ``BRIDGE_CONFIG``, defaults.

The field names are a public contract for scripts and operators; add fields, never rename them::

    redis_url = "redis://127.0.0.1:6379/0"

    [primary]
    connection_string = "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=...;SharedAccessKey=..."
    management_endpoint = "https://127.0.0.1:5301"   # optional; default: the Endpoint's host
    certificate = "/path/to/ca.pem"                  # optional; CA/cert for the management endpoint

    [secondary]
    connection_string = "..."

    [entities.orders]
    replication = "passive"   # passive | active | paired | none

Settings are validated once at start-up and passed in; nothing in ``bridge.core`` reads them globally.
Secrets are ``SecretStr`` so they never show in a repr, a log line or an error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from bridge.errors import ConfigurationError

CONFIG_ENV = "BRIDGE_CONFIG"
Replication = Literal["passive", "active", "paired", "none"]

_ENTITY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/~]{0,259}$")


class NamespaceSettings(BaseModel):
    """One Service Bus namespace: where it is and how to authenticate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    connection_string: SecretStr
    management_endpoint: str | None = None
    certificate: Path | None = None
    name: str | None = Field(
        default=None, description="Namespace name for backlog paths; default: first label of the host."
    )

    @field_validator("connection_string")
    @classmethod
    def _has_endpoint(cls, value: SecretStr) -> SecretStr:
        parts = parse_connection_string(value.get_secret_value())
        if "endpoint" not in parts:
            raise ValueError("connection string has no Endpoint=sb://... part")
        if not parts["endpoint"].startswith("sb://"):
            raise ValueError("connection string Endpoint must start with sb://")
        return value

    @property
    def endpoint_host(self) -> str:
        """``host[:port]`` of the AMQP endpoint (no secret in it)."""
        endpoint = parse_connection_string(self.connection_string.get_secret_value())["endpoint"]
        return endpoint.removeprefix("sb://").rstrip("/")

    @property
    def namespace_name(self) -> str:
        """The configured name, else the endpoint host's first label (``ns1`` of ``ns1.servicebus...``)."""
        if self.name:
            return self.name
        return self.endpoint_host.split(":", 1)[0].split(".", 1)[0]


class EntitySettings(BaseModel):
    """Per-entity options; later features add fields here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replication: Replication = "passive"
    max_message_size: int = Field(default=256 * 1024, gt=0, le=100 * 1024 * 1024)


class Settings(BaseSettings):
    """Everything the bridge's processes are configured with."""

    model_config = SettingsConfigDict(
        env_prefix="BRIDGE_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    primary: NamespaceSettings | None = None
    secondary: NamespaceSettings | None = None
    entities: dict[str, EntitySettings] = Field(default_factory=dict)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool = True

    @field_validator("entities")
    @classmethod
    def _entity_names(cls, value: dict[str, EntitySettings]) -> dict[str, EntitySettings]:
        for name in value:
            if not _ENTITY_NAME.match(name):
                raise ValueError(f"entity name {name!r} is not a valid Service Bus entity path")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_ENV)
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)

    def entity(self, name: str) -> EntitySettings:
        """The entity's settings; an entity that is not configured gets the defaults."""
        return self.entities.get(name, EntitySettings())


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


def load_settings(**overrides: Any) -> Settings:
    """Build and validate the settings, or raise ``ConfigurationError`` naming the first bad field.

    The message is built from field locations and pydantic's reason only, never from the input value, so a
    malformed secret is not echoed back.
    """
    config_file = os.environ.get(CONFIG_ENV)
    if config_file and not Path(config_file).is_file():
        raise ConfigurationError(f"{CONFIG_ENV} names {config_file!r}, which is not a readable file")
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_input=False, include_url=False):
            field = ".".join(str(part) for part in err["loc"]) or "(settings)"
            problems.append(f"invalid setting {field!r}: {err['msg']}")
        raise ConfigurationError("; ".join(problems)) from None
    except ValueError as exc:  # a TOML syntax error surfaces as a ValueError subclass
        raise ConfigurationError(f"cannot read {CONFIG_ENV} file {config_file!r}: {exc}") from None
