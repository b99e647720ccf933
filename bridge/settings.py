"""The one settings model.

Sources, strongest first: keyword arguments, environment variables (``BRIDGE_`` prefix, ``__`` between
nested names: ``BRIDGE_PRIMARY__CONNECTION_STRING``), the TOML file named by ``BRIDGE_CONFIG``, defaults.

The field names are a public contract for scripts and operators; add fields, never rename them::

    redis_url = "redis://127.0.0.1:6379/0"

    [primary]
    connection_string = "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=...;SharedAccessKey=..."
    management_endpoint = "https://127.0.0.1:5301"   # optional; default: the Endpoint's host
    certificate = "/path/to/ca.pem"                  # optional; CA/cert for the management endpoint

    [secondary]                                      # or sign in with Microsoft Entra ID:
    fully_qualified_namespace = "ns2.servicebus.windows.net"
    credential = "managed_identity"                  # default | managed_identity | workload_identity |
                                                     # client_secret | certificate | azure_cli
    transport = "amqp_websocket"                     # amqp (5671) | amqp_websocket (443)
    proxy = "http://user:pass@proxy:3128"            # optional; a secret

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

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from bridge.core.paired import FailoverPolicy
from bridge.core.validation import DEFAULT_MAX_MESSAGE_SIZE
from bridge.errors import ConfigurationError
from bridge.history_settings import HistorySettings
from bridge.journal_settings import JournalSettings
from bridge.namespace_settings import CredentialKind, NamespaceSettings, parse_connection_string
from bridge.receiver_settings import ReceiverSettings

# The namespace, receiver and journal sections live in modules of their own (bridge/namespace_settings.py says
# why for the first; the other two hold the receiving end's and the ledger's settings) and are part of this
# one model.
__all__ = [
    "CONFIG_ENV",
    "ApiKeySettings",
    "CredentialKind",
    "EntitySettings",
    "HistorySettings",
    "IngressSettings",
    "JournalSettings",
    "NamespaceSettings",
    "PairedSettings",
    "ReceiverSettings",
    "Replication",
    "RetrySettings",
    "Settings",
    "WorkerSettings",
    "load_settings",
    "parse_connection_string",
]

CONFIG_ENV = "BRIDGE_CONFIG"
TRACE_ID = "{trace_id}"
"""What ``trace_url`` holds in place of the trace id (32 hex digits)."""
Replication = Literal["passive", "active", "paired", "none"]
_ENTITY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/~]{0,259}\Z")  # \Z: "$" passes a trailing newline
_REDIS_SCHEMES = (
    "redis://",
    "rediss://",
    "unix://",
    # A Sentinel-managed primary or a Redis Cluster (URL forms: bridge.redis.connection).
    "redis+sentinel://",
    "rediss+sentinel://",
    "redis+cluster://",
    "rediss+cluster://",
)


class EntitySettings(BaseModel):
    """Per-entity options; later features add fields here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replication: Replication = "passive"
    max_message_size: int = Field(default=DEFAULT_MAX_MESSAGE_SIZE, gt=0, le=100 * 1024 * 1024)
    outbox_shards: int = Field(
        default=1, ge=1, le=256, description="Outbox streams; order is kept per partition key within one."
    )
    requires_session: bool = False
    requires_duplicate_detection: bool = False
    max_pending_messages: int = Field(default=1_000_000, gt=0, description="Backpressure bound (messages).")
    max_pending_bytes: int = Field(default=1024**3, gt=0, description="Backpressure bound (bytes).")
    max_problem_entries: int = Field(
        default=100_000,
        gt=0,
        description="Bound of the quarantine and of the dead-letter stream (entries, each); never trimmed.",
    )
    success_policy: Literal["any", "all"] = Field(
        default="any", description="Active replication: acknowledge when one namespace accepted, or both."
    )


class ApiKeySettings(BaseModel):
    """One API key of the HTTP ingress, stored as the SHA-256 hex digest of the key (never the key itself).

    Produce the digest with ``printf %s "$KEY" | sha256sum`` or
    ``python -c 'import hashlib,sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest())' "$KEY"``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Shown in logs instead of the key.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    entities: list[str] | None = Field(default=None, description="Allow-list; None allows every entity.")


class IngressSettings(BaseModel):
    """The three ingress doors and the outbox they write to (``docs/doors/http.md``,
    ``docs/durability.md``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    idempotency_window: float = Field(default=600.0, gt=0, description="Seconds a MessageId is remembered.")
    max_total_messages: int = Field(default=10_000_000, gt=0)
    max_total_bytes: int = Field(default=4 * 1024**3, gt=0)
    retry_after: float = Field(default=1.0, gt=0, description="Retry-After seconds when the outbox is full.")
    max_batch_messages: int = Field(default=1000, gt=0)
    max_request_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    body_read_timeout: float = Field(
        default=60.0, gt=0, description="Seconds a request's whole body may take to arrive (408 after)."
    )
    require_appendfsync: Literal["always", "everysec"] | None = Field(
        default=None,
        description="Refuse to start unless Redis runs AOF with this fsync policy (or stricter).",
    )
    durability: Literal["local", "replicated"] = Field(
        default="local",
        description=(
            "What an acknowledgement waits for: 'local' the primary's AOF (and WAIT for wait_replicas);"
            " 'replicated' WAITAOF: fsync'd on the primary and on wait_replicas replicas (Redis >= 7.2)."
        ),
    )
    wait_replicas: int = Field(
        default=0, ge=0, description="Replicas that confirm each write (WAIT; WAITAOF when replicated)."
    )
    wait_timeout: float = Field(default=0.5, gt=0)
    only_configured_entities: bool = False
    api_keys: list[ApiKeySettings] = Field(default_factory=list)
    require_api_key: bool = Field(default=False, description="Also on loopback (always when not loopback).")
    sas_key_name: str | None = None
    sas_key: SecretStr | None = None
    tls_certificate: Path | None = Field(
        default=None, description="PEM certificate (chain) of `bridge serve`: it then speaks HTTPS only."
    )
    tls_key: Path | None = Field(default=None, description="PEM private key of tls_certificate.")

    @model_validator(mode="after")
    def _replicated_needs_replicas(self) -> IngressSettings:
        if self.durability == "replicated" and self.wait_replicas < 1:
            raise ValueError("ingress.durability = 'replicated' needs ingress.wait_replicas >= 1")
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> IngressSettings:
        if (self.tls_certificate is None) != (self.tls_key is None):
            raise ValueError("ingress.tls_certificate and ingress.tls_key are set together or not at all")
        return self


class RetrySettings(BaseModel):
    """Send attempts: the SDK's own bounded retries (azure-servicebus names) and the bridge's limits.

    The SDK retries stay short so failover happens in seconds; ``attempt_deadline`` bounds every attempt
    outside the SDK (a blackholed endpoint hangs it in SASL forever). The outbox retry backoff is capped
    exponential with full jitter (``bridge.core.backoff``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    retry_total: int = Field(default=1, ge=0, description="SDK retries per operation.")
    retry_backoff_factor: float = Field(default=0.2, ge=0, description="SDK first retry delay (seconds).")
    retry_backoff_max: float = Field(default=2.0, ge=0, description="SDK retry delay cap (seconds).")
    attempt_deadline: float = Field(default=10.0, gt=0, description="Hard limit per send attempt (s).")
    abandoned_send_wait: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Seconds a shard sends nothing more to a namespace path after a send there timed out (the"
            " namespace may still commit the abandoned transfer: it must not land behind newer messages of"
            " its key); None: attempt_deadline; 0: off."
        ),
    )
    link_refresh_after: float | None = Field(
        default=300.0,
        gt=0,
        description=(
            "Seconds a cached sender may sit unused before it is reopened in the background (Service Bus"
            " detaches links idle for 600 s); None: never."
        ),
    )
    sender_socket_timeout: float = Field(
        default=0.02,
        gt=0,
        le=1.0,
        description=(
            "Seconds one SDK socket read waits on a sender's plain AMQP connection (the SDK's default: 0.2)."
            " The SDK's keep-alive reads every 30 s holding the connection's lock, so a send waited up to"
            " this long. Receivers keep 0.2 (a long poll wakes once per read); WebSockets keep the SDK's 1 s."
        ),
    )
    outbox_backoff_factor: float = Field(default=0.5, ge=0, description="First outbox retry delay (seconds).")
    outbox_backoff_max: float = Field(default=30.0, ge=0, description="Outbox retry delay cap (seconds).")
    outbox_scout_interval: float | None = Field(
        default=1.0,
        gt=0,
        description=(
            "Seconds between early tries of one backing-off shard of the whole deployment (the scout);"
            " its success wakes every backing-off shard at once. None: backoffs run out."
        ),
    )
    outbox_door_watch: float | None = Field(
        default=0.1,
        gt=0,
        description=(
            "Seconds between TCP connects each worker process makes to a namespace's address that refuses"
            " connections while its shards back off; the first that works has one of them try at once"
            " instead of at the scout's next turn. None: off."
        ),
    )
    transient_failures_to_outage: int = Field(
        default=3, ge=1, description="Transient failures in a row that count as an outage."
    )
    transient_seconds_to_outage: float = Field(
        default=10.0, ge=0, description="Seconds of transient failures in a row that count as an outage."
    )

    @property
    def abandoned_wait(self) -> float:
        """``abandoned_send_wait`` in seconds, its default (the attempt deadline) applied."""
        return self.attempt_deadline if self.abandoned_send_wait is None else self.abandoned_send_wait


class PairedSettings(BaseModel):
    """Paired-namespace mode, named after .NET's SendAvailabilityPairedNamespaceOptions (same defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backlog_queue_count: int = Field(default=10, ge=1, le=1000)
    failover_interval: float = Field(default=60.0, ge=0, description="Seconds; 0 fails over at once.")
    ping_primary_interval: float = Field(default=60.0, gt=0)
    ping_timeout: float = Field(default=120.0, gt=0)
    ping_mode: Literal["message", "schedule"] = Field(
        default="message", description="'schedule' schedules far ahead and cancels: never visible."
    )
    syphon_batch_size: int = Field(default=100, ge=1, le=5000)
    syphon_retry_interval: float = Field(default=1.0, gt=0)
    syphon_receive_wait: float = Field(
        default=60.0,
        gt=0,
        description="Long-poll seconds per receive; the original used 900 (40 idle polls/hour, 10 queues).",
    )
    enable_syphon: bool = True
    syphon_lease_ttl: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a syphon's lease on a backlog queue lives unrenewed (a dead syphon's takeover).",
    )
    syphon_run_budget: float = Field(
        default=60.0, gt=0, description="Seconds one syphon task holds its backlog queues, then hands over."
    )
    backlog_readmit_after: float | None = Field(
        default=60.0, gt=0, description="Seconds until a failed backlog queue is used again; None: never."
    )
    barrier_timeout: float = Field(
        default=900.0,
        gt=0,
        description="Seconds a restore barrier may go unpassed before it is declared lost and sent again.",
    )
    backlog_depth_ttl: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a measured backlog queue depth is reused by the status page and /metrics.",
    )
    restore_order: Literal["ordered", "fast"] = Field(
        default="ordered",
        description=(
            "'ordered': a key sticks to one backlog queue and the primary is used again only after the "
            "syphon moved what went to the backlog; "
            "'fast': the .NET behaviour (random queue, switch at once)."
        ),
    )

    def failover_policy(self) -> FailoverPolicy:
        """The namespace-wide FailoverInterval / PingPrimaryInterval / ping timeout (the core's policy)."""
        return FailoverPolicy(self.failover_interval, self.ping_primary_interval, self.ping_timeout)


class WorkerSettings(BaseModel):
    """The Celery send workers and beat: where tasks queue and how long a drain holds a shard."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queue: str = Field(default="bridge", min_length=1, description="Celery queue of the bridge's tasks.")
    sweep_interval: float = Field(default=1.0, gt=0, description="Seconds between sweeper runs.")
    drain_budget: float = Field(
        default=5.0,
        gt=0,
        description="Seconds one drain task may run before it hands its worker slot back (fairness).",
    )
    lease_ttl: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a shard lease lives unrenewed (a dead worker blocks its shard that long).",
    )
    probe_interval: float | None = Field(
        default=60.0,
        gt=0,
        description="Seconds between probes of namespaces that carry no traffic (passive backup); None: off.",
    )
    reclaim_interval: float = Field(
        default=30.0,
        gt=0,
        description="Seconds between a drainer's re-reads of its own pending entries (acks a failover lost).",
    )
    discover_interval: float = Field(
        default=10.0,
        gt=0,
        description="Seconds between scans for Redis-door streams of entities not named in the settings.",
    )
    drain_threads: int = Field(
        default=8,
        ge=1,
        le=256,
        description="Threads per worker process that send for its shards (however many shards it owns).",
    )
    max_senders: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="Service Bus senders (entity paths) a process keeps open per namespace; LRU beyond.",
    )
    entity_idle: float = Field(
        default=600.0,
        gt=0,
        description="Seconds an entity not named in the settings stays watched once its outbox is empty.",
    )
    idle_sender_close: float | None = Field(
        default=900.0,
        gt=0,
        description=(
            "Seconds a Service Bus sender may go unused before it is closed (its link, connection and"
            " keep-alive thread); never while a send uses it. None: kept until evicted (max_senders)."
        ),
    )


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
    ingress: IngressSettings = Field(default_factory=IngressSettings)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    paired: PairedSettings = Field(default_factory=PairedSettings)
    workers: WorkerSettings = Field(default_factory=WorkerSettings)
    receiver: ReceiverSettings = Field(default_factory=ReceiverSettings)
    journal: JournalSettings = Field(default_factory=JournalSettings)
    status_history: HistorySettings = Field(default_factory=HistorySettings)
    celery_broker_url: SecretStr | None = Field(
        default=None, description="Celery broker; default redis_url (required when redis_url is a Cluster)."
    )
    # Operations (docs/operations.md): Sentry, the Prometheus endpoint of the non-HTTP processes.
    sentry_dsn: SecretStr | None = Field(default=None, description="Report errors and failovers to Sentry.")
    sentry_environment: str | None = None
    sentry_traces_sample_rate: float = Field(default=0.0, ge=0, le=1)
    metrics_host: str = Field(default="127.0.0.1", description="Where worker/beat/receiver serve /metrics.")
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="Port of the worker/beat/receiver metrics; None: none."
    )
    metrics_dir: Path | None = Field(
        default=None, description="Prefork workers' metric files (wiped at start); default: a temp dir."
    )
    trace_url: str | None = Field(
        default=None,
        description=(
            "A trace viewer's URL with {trace_id} in it (http://jaeger:16686/trace/{trace_id}): the status "
            "page links a last error's trace there (docs/tracing.md)."
        ),
    )

    @field_validator("trace_url")
    @classmethod
    def _trace_url(cls, value: str | None) -> str | None:
        # The status page puts it in an href: only web URLs, so a setting cannot make a javascript: link.
        if value is not None and (not value.startswith(("http://", "https://")) or TRACE_ID not in value):
            raise ValueError(f"must be an http:// or https:// URL with {TRACE_ID} in it")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: SecretStr) -> SecretStr:
        # The URL may carry a password, so the message names the accepted schemes, not the value.
        if not value.get_secret_value().startswith(_REDIS_SCHEMES):
            raise ValueError(
                "must start with redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://"
            )
        return value

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


def load_settings(**overrides: Any) -> Settings:
    """Build and validate the settings, or raise ``ConfigurationError`` naming the first bad field.

    The message is built from field locations and pydantic's reason only, never from the input value, so a
    malformed secret is not echoed back.
    """
    config_file = os.environ.get(CONFIG_ENV)
    if config_file and not Path(config_file).is_file():
        raise ConfigurationError(f"{CONFIG_ENV} names {config_file!r}, which is not a readable file")
    # The error is raised after the ``except`` block so it carries no ``__context__``: pydantic's
    # ValidationError holds the input values, and error reporters (Sentry, rich tracebacks) may walk the
    # exception chain.
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_input=False, include_url=False):
            field = ".".join(str(part) for part in err["loc"]) or "(settings)"
            reason = err["msg"].removeprefix("Value error, ")
            problems.append(f"invalid setting {field!r}: {reason}")
        message = "; ".join(problems)
    except SettingsError as exc:
        # e.g. BRIDGE_ENTITIES='{not json'; pydantic-settings names the field and source, not the value.
        message = f"invalid setting: {exc}"
    except (ValueError, OSError) as exc:  # tomllib.TOMLDecodeError is a ValueError; unreadable file: OSError
        message = f"cannot read {CONFIG_ENV} file {config_file!r}: {exc}"
    raise ConfigurationError(message)
