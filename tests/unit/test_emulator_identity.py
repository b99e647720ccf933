"""The local issuer's pieces without a network: the identities file, tokens and what a token grants."""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from bridge.emulator.errors import ArgumentError, UnauthorizedError
from bridge.emulator.identity import tokens
from bridge.emulator.identity.directory import parse_directory
from bridge.emulator.identity.grants import AuthPolicy, require
from bridge.emulator.identity.keys import ensure_issuer_key
from bridge.emulator.identity.rights import OWNER, RECEIVER, SENDER, Right

NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return ensure_issuer_key(tmp_path_factory.mktemp("issuer"))


def directory():  # type: ignore[no-untyped-def]
    return parse_directory(
        {
            "lifetime_seconds": 120,
            "identities": {
                "app": {"roles": ["owner"], "system_assigned": True},
                "pub": {"roles": ["sender"], "secret": "x"},
                "sub": {"roles": ["Azure Service Bus Data Receiver"]},
            },
        }
    )


def test_identities_file_maps_short_role_names_and_finds_identities() -> None:
    found = directory()
    assert found.lifetime_seconds == 120
    assert found.system_assigned() is not None and found.system_assigned().roles == (OWNER,)  # type: ignore[union-attr]
    pub = found.identities[1]
    assert found.by_client_id(pub.client_id.upper()) is pub and pub.roles == (SENDER,)
    assert found.identities[2].roles == (RECEIVER,)
    assert "x" not in repr(pub)  # the secret stays out of reprs (and so out of logs)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, "declares no"),
        ({"identities": {"a": {"roles": ["admin"]}}}, "unknown role 'admin'"),
        ({"identities": {"a": {"roles": [], "colour": 1}}}, "unknown field(s) colour"),
        ({"lifetime_seconds": 0, "identities": {"a": {}}}, "lifetime_seconds"),
        ({"identities": {"a": {"system_assigned": True}, "b": {"system_assigned": True}}}, "at most one"),
        ({"identities": {"a": {"client_id": "c"}, "b": {"client_id": "C"}}}, "share a client_id"),
        ({"identities": {"a": {"certificate": "missing.pem"}}}, "cannot read"),
    ],
)
def test_bad_identities_file_is_one_clear_error(document: dict, message: str, tmp_path: Path) -> None:  # type: ignore[type-arg]
    with pytest.raises(ArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_directory(document, base=tmp_path)


def test_token_grants_the_rights_of_its_roles(key) -> None:  # type: ignore[no-untyped-def]
    policy = AuthPolicy({"k": "v"}, local_auth=False, issuer=key)
    found = directory()
    for identity, rights in zip(
        found.identities,
        [set(Right), {Right.SEND}, {Right.LISTEN}],
        strict=True,
    ):
        token, expires = tokens.mint(key, identity, NOW, 120)
        grant = policy.grant(token, "sb://h/q", NOW + 60)
        assert grant.rights == rights and grant.expires_at == expires
    sender_grant = policy.grant(tokens.mint(key, found.identities[1], NOW, 120)[0], "sb://h/q", NOW)
    with pytest.raises(UnauthorizedError, match="'Listen' claim"):
        require(sender_grant, Right.LISTEN, "sb://h/q")


def test_refused_tokens(key) -> None:  # type: ignore[no-untyped-def]
    policy = AuthPolicy({"k": "v"}, local_auth=False, issuer=key)
    owner = directory().identities[0]
    good, _ = tokens.mint(key, owner, NOW, 120)
    claims = jwt.decode(good, options={"verify_signature": False})
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused = {
        "ExpiredToken": tokens.mint(key, owner, NOW - 200, 120)[0],
        "InvalidAudience": tokens.mint(key, owner, NOW, 120, audience="https://storage.azure.com")[0],
        "not RS256": jwt.encode(claims, None, algorithm="none"),
        "InvalidSignature": jwt.encode(claims, other, algorithm="RS256"),
        "InvalidIssuer": jwt.encode({**claims, "iss": "https://elsewhere/"}, key.private, algorithm="RS256"),
        "not a JWT": "garbage",
        "LocalAuthDisabled": "SharedAccessSignature sr=a&sig=b&se=1&skn=k",
    }
    for reason, token in refused.items():
        with pytest.raises(UnauthorizedError, match=reason) as caught:
            policy.grant(token, "sb://h/q", NOW)
        assert token not in str(caught.value)


def test_namespace_without_issuer_refuses_jwts(key) -> None:  # type: ignore[no-untyped-def]
    token, _ = tokens.mint(key, directory().identities[0], time.time(), 120)
    with pytest.raises(UnauthorizedError, match="accepts no Microsoft Entra ID token"):
        AuthPolicy({"k": "v"}).grant(token, "sb://h/q", time.time())


def test_issuer_key_is_created_once_and_shared(tmp_path: Path) -> None:
    first = ensure_issuer_key(tmp_path)
    second = ensure_issuer_key(tmp_path)
    assert (first.kid, first.issuer, first.tenant) == (second.kid, second.issuer, second.tenant)
    assert (tmp_path / "signing-key.pem").stat().st_mode & 0o077 == 0
