"""SAS tokens: the emulator accepts exactly what azure-servicebus produces and refuses everything else."""

from __future__ import annotations

import pytest
from azure.servicebus._base_handler import ServiceBusSharedKeyCredential
from azure.servicebus._pyamqp.utils import generate_sas_token

from bridge.emulator import sas
from bridge.emulator.errors import UnauthorizedError

KEYS = {"Root": "root-key-value", "Listen": "listen-key-value"}
NOW = 1_700_000_000.0


def sdk_token(audience: str, name: str = "Root", key: str | None = None) -> tuple[str, int]:
    """A token made by the SDK's own credential class, as the AMQP and admin clients send it."""
    access = ServiceBusSharedKeyCredential(name, key or KEYS[name]).get_token(audience)
    return access.token, access.expires_on


@pytest.mark.parametrize(
    ("audience", "resource"),
    [
        ("sb://127.0.0.1:5700/q1", "sb://127.0.0.1:5700/q1"),
        ("sb://127.0.0.1:5700/q1", "amqps://127.0.0.1:5700/q1/$management"),
        ("sb://127.0.0.1:5700/t1/Subscriptions/s1", "sb://127.0.0.1:5700/T1/subscriptions/S1/"),
        ("https://127.0.0.1:5700", "https://127.0.0.1:5700/q1"),
        ("https://127.0.0.1:5700", "https://127.0.0.1:5700/t1/subscriptions/s1/rules/r1"),
        ("sb://127.0.0.1:5700", "amqps://127.0.0.1:5700/q1"),
    ],
)
def test_sdk_tokens_are_accepted_for_covered_resources(audience: str, resource: str) -> None:
    token, expires_on = sdk_token(audience)
    sas.validate(token, KEYS, resource, now=expires_on - 1)


@pytest.mark.parametrize(
    ("token_args", "resource", "now_offset", "reason"),
    [
        (("sb://h:1/q1", "Root", "wrong-key"), "sb://h:1/q1", -1, "signature does not match"),
        (("sb://h:1/q1", "Nobody", "whatever"), "sb://h:1/q1", -1, "unknown shared access key name 'Nobody'"),
        (("sb://h:1/q1", "Root", None), "sb://h:1/q1", +1, "expired"),
        (("sb://h:1/q1", "Root", None), "sb://h:1/q2", -1, "does not cover"),
        (("sb://h:1/q1", "Root", None), "sb://h:1/q10", -1, "does not cover"),
        (("sb://h:1/q1", "Root", None), "sb://other:1/q1", -1, "does not cover"),
        (("sb://h:1/t1/Subscriptions/s1", "Root", None), "sb://h:1/t1", -1, "does not cover"),
        (("https://h:1", "Root", None), "https://h:12/q1", -1, "does not cover"),
    ],
)
def test_bad_tokens_are_refused_with_a_reason(
    token_args: tuple[str, str, str | None], resource: str, now_offset: int, reason: str
) -> None:
    audience, name, key = token_args
    token, expires_on = sdk_token(audience, name, key)
    with pytest.raises(UnauthorizedError, match=reason) as caught:
        sas.validate(token, KEYS, resource, now=expires_on + now_offset)
    message = str(caught.value)
    assert "root-key-value" not in message and "wrong-key" not in message
    assert token.split("sig=")[1].split("&")[0] not in message


def test_token_valid_until_its_expiry_second() -> None:
    token = generate_sas_token("sb://h/q1", "Root", KEYS["Root"], int(NOW))
    sas.validate(token, KEYS, "sb://h/q1", now=NOW)
    with pytest.raises(UnauthorizedError, match="expired"):
        sas.validate(token, KEYS, "sb://h/q1", now=NOW + 1)


def test_key_names_with_reserved_characters_are_found_despite_double_encoding() -> None:
    keys = {"my key&co": "k"}
    token, expires_on = sdk_token("sb://h/q1", "my key&co", "k")
    sas.validate(token, keys, "sb://h/q1", now=expires_on - 1)


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("Bearer abc", "not a SharedAccessSignature"),
        ("SharedAccessSignature sr=a&sig=b&se=1", "missing skn"),
        ("SharedAccessSignature sr=a&sr=a&sig=b&se=1&skn=Root", "repeated"),
        ("SharedAccessSignature sr=a&sig=b&se=soon&skn=Root", "se is not an integer"),
        ("SharedAccessSignature sr=a&sig=b&se=1&skn=Root&x=1", "unexpected"),
        ("SharedAccessSignature garbage", "unexpected"),
    ],
)
def test_malformed_tokens_are_refused(token: str, reason: str) -> None:
    with pytest.raises(UnauthorizedError, match=reason):
        sas.validate(token, KEYS, "sb://h/q1", now=0)


def test_signature_of_another_resource_does_not_verify_when_sr_is_swapped() -> None:
    # Given a valid token for q2, when its audience is rewritten to q1, the signature no longer matches.
    token = generate_sas_token("sb://h/q2", "Root", KEYS["Root"], int(NOW) + 60)
    forged = token.replace("q2", "q1")
    with pytest.raises(UnauthorizedError, match="signature does not match"):
        sas.validate(forged, KEYS, "sb://h/q1", now=NOW)


@pytest.mark.parametrize(
    ("audience", "resource", "expected"),
    [
        ("sb://h/q1", "sb://h/q1", True),
        ("sb://h/q1/", "SB://H/Q1", True),
        ("sb://h/q1", "sb://h/q10", False),
        ("sb://h/q1", "sb://h/q1/$deadletterqueue", True),
        ("https://h", "amqps://h/anything", True),
        ("sb://h/q1", "sb://h", False),
    ],
)
def test_covers_table(audience: str, resource: str, expected: bool) -> None:
    assert sas.covers(audience, resource) is expected
