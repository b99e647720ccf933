"""The settings model: sources, their order, validation messages and secret hygiene."""

from __future__ import annotations

import os
import traceback
from pathlib import Path

import pytest

from bridge.errors import ConfigurationError
from bridge.settings import CONFIG_ENV, EntitySettings, NamespaceSettings, Settings, load_settings

SECRET = "TOPSECRETkey0123456789abcdef+/="
GOOD_CS = f"Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey={SECRET}"
OTHER_CS = f"Endpoint=sb://ns2.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey={SECRET}2"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No BRIDGE_* variable of the machine running the tests leaks in; no stray files in the cwd."""
    for name in list(os.environ):
        if name.upper().startswith("BRIDGE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def write_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return path


def error_text(exc: BaseException) -> str:
    """Everything an operator or an error reporter could see: message, repr and the formatted chain."""
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


# --- sources ----------------------------------------------------------------------------------------------


def test_defaults() -> None:
    settings = load_settings()
    assert settings.redis_url.get_secret_value() == "redis://127.0.0.1:6379/0"
    assert settings.primary is None
    assert settings.secondary is None
    assert settings.entities == {}
    assert settings.log_level == "INFO"
    assert settings.log_json is True


def test_unconfigured_entity_gets_passive_replication() -> None:
    settings = load_settings()
    assert settings.entity("anything").replication == "passive"
    assert settings.entity("anything").max_message_size == 256 * 1024


def test_env_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_REDIS_URL", "redis://127.0.0.1:7001/3")
    monkeypatch.setenv("REDIS_URL", "redis://ignored:1/0")
    monkeypatch.setenv("BRIDGE_LOG_LEVEL", "DEBUG")
    settings = load_settings()
    assert settings.redis_url.get_secret_value() == "redis://127.0.0.1:7001/3"
    assert settings.log_level == "DEBUG"


def test_env_nested_delimiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_PRIMARY__CONNECTION_STRING", GOOD_CS)
    monkeypatch.setenv("BRIDGE_PRIMARY__MANAGEMENT_ENDPOINT", "https://127.0.0.1:5301")
    monkeypatch.setenv("BRIDGE_PRIMARY__CERTIFICATE", "/etc/bridge/ca.pem")
    monkeypatch.setenv("BRIDGE_SECONDARY__CONNECTION_STRING", OTHER_CS)
    monkeypatch.setenv("BRIDGE_ENTITIES__ORDERS__REPLICATION", "active")
    settings = load_settings()
    assert settings.primary is not None
    assert settings.secondary is not None
    assert settings.primary.connection_string.get_secret_value() == GOOD_CS
    assert settings.primary.management_endpoint == "https://127.0.0.1:5301"
    assert settings.primary.certificate == Path("/etc/bridge/ca.pem")
    assert settings.secondary.connection_string.get_secret_value() == OTHER_CS
    assert settings.entity("orders").replication == "active"


def test_toml_file_named_by_bridge_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(
        tmp_path,
        monkeypatch,
        f"""
        redis_url = "redis://127.0.0.1:7002/0"

        [primary]
        connection_string = "{GOOD_CS}"
        management_endpoint = "https://127.0.0.1:5301"

        [secondary]
        connection_string = "{OTHER_CS}"
        name = "west"

        [entities.orders]
        replication = "paired"
        max_message_size = 1048576

        [entities."Mixed/Case"]
        replication = "none"
        """.replace("\n        ", "\n"),
    )
    settings = load_settings()
    assert settings.redis_url.get_secret_value() == "redis://127.0.0.1:7002/0"
    assert settings.primary is not None and settings.secondary is not None
    assert settings.primary.connection_string.get_secret_value() == GOOD_CS
    assert settings.primary.management_endpoint == "https://127.0.0.1:5301"
    assert settings.secondary.namespace_name == "west"
    assert settings.entities == {
        "orders": EntitySettings(replication="paired", max_message_size=1048576),
        "Mixed/Case": EntitySettings(replication="none"),
    }


def test_env_overrides_file_field_by_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given: a file with the shape, the environment with one override per table
    write_config(
        tmp_path,
        monkeypatch,
        f"""
redis_url = "redis://127.0.0.1:7003/0"
[primary]
connection_string = "{GOOD_CS}"
management_endpoint = "https://from-file:5301"
[entities.orders]
replication = "paired"
max_message_size = 1000
""",
    )
    monkeypatch.setenv("BRIDGE_REDIS_URL", "redis://127.0.0.1:7004/0")
    monkeypatch.setenv("BRIDGE_PRIMARY__MANAGEMENT_ENDPOINT", "https://from-env:5301")
    monkeypatch.setenv("BRIDGE_ENTITIES__ORDERS__REPLICATION", "active")
    # When
    settings = load_settings()
    # Then: the environment wins where it speaks, the file fills in the rest of the same table
    assert settings.redis_url.get_secret_value() == "redis://127.0.0.1:7004/0"
    assert settings.primary is not None
    assert settings.primary.management_endpoint == "https://from-env:5301"
    assert settings.primary.connection_string.get_secret_value() == GOOD_CS
    assert settings.entity("orders") == EntitySettings(replication="active", max_message_size=1000)


def test_keyword_overrides_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_REDIS_URL", "redis://127.0.0.1:7005/0")
    settings = load_settings(redis_url="redis://127.0.0.1:7006/0")
    assert settings.redis_url.get_secret_value() == "redis://127.0.0.1:7006/0"


def test_bridge_config_itself_is_not_a_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, monkeypatch, "log_json = false\n")
    assert load_settings().log_json is False


# --- invalid settings -------------------------------------------------------------------------------------


def test_invalid_replication_from_env_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_ENTITIES__ORDERS__REPLICATION", "sometimes")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    message = str(info.value)
    assert "entities.orders.replication" in message
    assert "'passive'" in message
    assert "\n" not in message


def test_invalid_replication_from_file_names_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(tmp_path, monkeypatch, '[entities.orders]\nreplication = "mirror"\n')
    with pytest.raises(ConfigurationError, match=r"entities\.orders\.replication"):
        load_settings()


@pytest.mark.parametrize(
    ("env", "value", "field"),
    [
        ("BRIDGE_ENTITIES__ORDERS__MAX_MESSAGE_SIZE", "0", "entities.orders.max_message_size"),
        ("BRIDGE_ENTITIES__ORDERS__MAX_MESSAGE_SIZE", "lots", "entities.orders.max_message_size"),
        ("BRIDGE_ENTITIES__ORDERS__COLOUR", "blue", "entities.orders.colour"),
        ("BRIDGE_LOG_LEVEL", "LOUD", "log_level"),
        ("BRIDGE_LOG_JSON", "maybe", "log_json"),
        ("BRIDGE_PRIMARY__MANAGEMENT_ENDPOINT", "https://x", "primary"),
    ],
)
def test_invalid_values_name_their_field(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, field: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert f"'{field}'" in str(info.value)


def test_unknown_key_in_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, monkeypatch, f'[primary]\nconnection_strng = "{GOOD_CS}"\n')
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert "primary.connection_strng" in str(info.value)
    assert SECRET not in error_text(info.value)


def test_invalid_entity_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, monkeypatch, '[entities."-bad name"]\nreplication = "active"\n')
    with pytest.raises(ConfigurationError, match="'entities'"):
        load_settings()


def test_unparsable_env_json_names_the_field_not_the_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_ENTITIES", "{not json")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert '"entities"' in str(info.value)
    assert CONFIG_ENV not in str(info.value)


@pytest.mark.parametrize(
    "connection_string",
    [
        SECRET,  # not key=value at all
        f"SharedAccessKeyName=send;SharedAccessKey={SECRET}",  # no Endpoint
        f"Endpoint=https://ns1.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey={SECRET}",
        f"Endpoint=sb://;SharedAccessKeyName=send;SharedAccessKey={SECRET}",  # no host
        f"Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKey={SECRET}",  # key without its name
        f"Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=send;{SECRET}",
    ],
)
def test_malformed_connection_string_is_named_but_never_echoed(
    monkeypatch: pytest.MonkeyPatch, connection_string: str
) -> None:
    monkeypatch.setenv("BRIDGE_PRIMARY__CONNECTION_STRING", connection_string)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert "primary.connection_string" in str(info.value)
    assert SECRET not in error_text(info.value)
    # Nothing chained: pydantic's ValidationError would carry the input value.
    assert info.value.__cause__ is None
    assert info.value.__context__ is None


def test_connection_string_with_shared_access_signature_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "BRIDGE_PRIMARY__CONNECTION_STRING",
        "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessSignature=SharedAccessSignature sr=x&sig=y",
    )
    assert load_settings().primary is not None


def test_redis_url_with_wrong_scheme_is_named_but_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_REDIS_URL", f"http://:{SECRET}@127.0.0.1:7000/0")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert "redis_url" in str(info.value)
    assert SECRET not in error_text(info.value)


def test_missing_config_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope.toml"
    monkeypatch.setenv(CONFIG_ENV, str(missing))
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert CONFIG_ENV in str(info.value)
    assert str(missing) in str(info.value)


def test_config_file_that_is_a_directory_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path))
    with pytest.raises(ConfigurationError, match=CONFIG_ENV):
        load_settings()


def test_toml_syntax_error_names_the_file_but_not_its_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, monkeypatch, f'[primary]\nconnection_string = "{GOOD_CS}\n')
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert str(path) in str(info.value)
    assert CONFIG_ENV in str(info.value)
    assert SECRET not in error_text(info.value)


# --- secrets and derived values ---------------------------------------------------------------------------


def test_repr_str_and_dump_hide_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_PRIMARY__CONNECTION_STRING", GOOD_CS)
    monkeypatch.setenv("BRIDGE_SECONDARY__CONNECTION_STRING", OTHER_CS)
    monkeypatch.setenv("BRIDGE_REDIS_URL", f"redis://:{SECRET}@127.0.0.1:7000/0")
    settings = load_settings()
    shown = "\n".join(
        [repr(settings), str(settings), settings.model_dump_json(), repr(settings.primary), f"{settings}"]
    )
    assert SECRET not in shown
    assert "**********" in shown
    # ...while the code that needs the secret still gets it.
    assert settings.primary is not None
    assert SECRET in settings.primary.connection_string.get_secret_value()


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("sb://contoso-east.servicebus.windows.net/", "contoso-east"),
        ("sb://contoso-east.servicebus.windows.net", "contoso-east"),
        ("sb://contoso-east.servicebus.windows.net:5671/", "contoso-east"),
        ("sb://ns1.servicebus.chinacloudapi.cn/", "ns1"),
        ("sb://127.0.0.1:5671", "127-0-0-1-5671"),
        ("sb://127.0.0.1:5672/", "127-0-0-1-5672"),
        ("sb://localhost:5671", "localhost-5671"),
        ("sb://[::1]:5671", "1-5671"),
    ],
)
def test_namespace_name_is_derived_from_the_endpoint_host(endpoint: str, expected: str) -> None:
    ns = NamespaceSettings(
        connection_string=f"Endpoint={endpoint};SharedAccessKeyName=send;SharedAccessKey={SECRET}"  # type: ignore[arg-type]
    )
    assert ns.namespace_name == expected
    assert SECRET not in ns.endpoint_host


def test_explicit_namespace_name_wins() -> None:
    ns = NamespaceSettings(connection_string=GOOD_CS, name="primary")  # type: ignore[arg-type]
    assert ns.namespace_name == "primary"


def test_two_local_namespaces_get_distinct_derived_names(monkeypatch: pytest.MonkeyPatch) -> None:
    # The local Service Bus runs both namespaces on 127.0.0.1; only the port tells them apart.
    monkeypatch.setenv(
        "BRIDGE_PRIMARY__CONNECTION_STRING",
        "Endpoint=sb://127.0.0.1:5671;SharedAccessKeyName=a;SharedAccessKey=b;UseDevelopmentEmulator=true",
    )
    monkeypatch.setenv(
        "BRIDGE_SECONDARY__CONNECTION_STRING",
        "Endpoint=sb://127.0.0.1:5681;SharedAccessKeyName=a;SharedAccessKey=b;UseDevelopmentEmulator=true",
    )
    settings = load_settings()
    assert settings.primary is not None and settings.secondary is not None
    assert settings.primary.namespace_name != settings.secondary.namespace_name


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValueError, match="frozen"):
        settings.log_level = "DEBUG"  # type: ignore[misc]


def test_ingress_tls_certificate_and_key_come_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_INGRESS__TLS_CERTIFICATE", "/etc/bridge/cert.pem")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert "tls_key" in str(info.value)
    monkeypatch.setenv("BRIDGE_INGRESS__TLS_KEY", "/etc/bridge/key.pem")
    ingress = load_settings().ingress
    assert (ingress.tls_certificate, ingress.tls_key) == (
        Path("/etc/bridge/cert.pem"),
        Path("/etc/bridge/key.pem"),
    )


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("http://jaeger:16686/trace/{trace_id}", True),
        ("https://grafana.example/explore?traceId={trace_id}&orgId=1", True),
        ("http://jaeger:16686/trace/", False),  # no {trace_id}: every link would be the same page
        ("javascript:alert('{trace_id}')", False),  # the status page puts it in an href
        ("/trace/{trace_id}", False),
    ],
)
def test_the_trace_viewer_url_is_a_web_url_with_the_trace_id(
    monkeypatch: pytest.MonkeyPatch, value: str, accepted: bool
) -> None:
    monkeypatch.setenv("BRIDGE_TRACE_URL", value)
    if accepted:
        assert load_settings().trace_url == value
        return
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert "'trace_url'" in str(info.value) and "{trace_id}" in str(info.value)
