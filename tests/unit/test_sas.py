"""SAS tokens: the emulator accepts exactly what azure-servicebus produces and refuses everything else."""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote

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


def js_admin_token(url: str, expiry: int, name: str = "Root") -> str:
    """A token as ``@azure/service-bus`` 7.x's administration client signs one request: over the request's
    full lower-cased URL, query included, percent-encoded as ``encodeURIComponent`` does, then lower-cased
    again (``sasServiceClientCredentials.js``); the signature is ``encodeURIComponent``-ed too."""
    target = quote(url.lower(), safe="-_.!~*'()").lower()
    digest = hmac.new(KEYS[name].encode(), f"{target}\n{expiry}".encode(), hashlib.sha256).digest()
    signature = quote(base64.b64encode(digest).decode(), safe="")
    return f"SharedAccessSignature sig={signature}&se={expiry}&skn={name}&sr={target}"


@pytest.mark.parametrize(
    ("url", "resource"),
    [
        ("https://h:1/q1?api-version=2021-05", "https://h:1/q1"),
        (
            "https://h:1/T1/Subscriptions/S1/Rules/?api-version=2021-05&$skip=0&$top=2",
            "https://h:1/t1/Subscriptions/s1/Rules",
        ),
        ("https://h:1/$namespaceinfo?api-version=2021-05", "https://h:1/$namespaceinfo"),
    ],
)
def test_tokens_signed_over_a_url_with_its_query_cover_that_url_path(url: str, resource: str) -> None:
    sas.validate(js_admin_token(url, int(NOW) + 60), KEYS, resource, now=NOW)


def test_a_token_signed_over_a_url_with_a_query_covers_no_other_entity() -> None:
    with pytest.raises(UnauthorizedError, match="does not cover"):
        sas.validate(
            js_admin_token("https://h:1/q1?api-version=2021-05", int(NOW) + 60), KEYS, "https://h:1/q2", NOW
        )


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
        ("https://h/q1?api-version=2021-05", "https://h/q1", True),
        ("https://h/q1?api-version=2021-05", "https://h/q1/subscriptions", True),
        ("https://h/q1?x=/q2", "https://h/q2", False),
        ("https://h", "amqps://h/anything", True),
        ("sb://h/q1", "sb://h", False),
    ],
)
def test_covers_table(audience: str, resource: str, expected: bool) -> None:
    assert sas.covers(audience, resource) is expected
