"""What a presented token allows: one policy for CBS put-token, link attaches and the management endpoint.

A SAS token (``SharedAccessSignature ...``) is checked against the namespace's keys and grants every right
(the local namespace has only a Manage rule), unless local auth is disabled: then it is refused, as Azure
refuses SAS on a namespace with ``disableLocalAuth``. Any other token is a JWT from Entra ID: it must be
signed by the trusted issuer (``keys``) and grants the rights of its ``roles``. A valid token that lacks
the right an operation needs is refused with Azure's wording, which names the missing claim
(``'Send' claim(s) are required``) so the client's error says which role to assign.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bridge.emulator import sas
from bridge.emulator.errors import UnauthorizedError
from bridge.emulator.identity import tokens
from bridge.emulator.identity.keys import IssuerKey
from bridge.emulator.identity.rights import ALL_RIGHTS, Right, rights_of


@dataclass(frozen=True, slots=True)
class Grant:
    """The rights a token gives and when it stops giving them (``None``: checked again at each use)."""

    rights: frozenset[Right]
    expires_at: float | None
    principal: str


@dataclass
class AuthPolicy:
    """How one namespace authenticates: its SAS keys, whether SAS is allowed, which issuer it trusts."""

    sas_keys: Mapping[str, str] = field(repr=False)
    local_auth: bool = True
    issuer: IssuerKey | None = field(default=None, repr=False)

    def grant(self, token: str, resource: str, now: float) -> Grant:
        """Check ``token`` for ``resource`` at ``now``: its grant, or ``UnauthorizedError`` saying why."""
        if token.startswith(sas.PREFIX):
            if not self.local_auth:
                raise UnauthorizedError(
                    "LocalAuthDisabled: local authentication (SAS) is disabled on this namespace; "
                    "sign in with Microsoft Entra ID."
                )
            sas.validate(token, self.sas_keys, resource, now)
            return Grant(ALL_RIGHTS, None, "sas")
        if self.issuer is None:
            raise UnauthorizedError("InvalidToken: this namespace accepts no Microsoft Entra ID token")
        principal = tokens.verify(token, self.issuer, now)
        return Grant(rights_of(principal.roles), principal.expires_at, principal.object_id)


def missing_right(right: Right, resource: str) -> UnauthorizedError:
    """Azure's refusal of a valid token that lacks ``right``."""
    return UnauthorizedError(
        f"Unauthorized access. '{right.value}' claim(s) are required to perform this operation. "
        f"Resource: '{resource}'."
    )


def require(grant: Grant, right: Right, resource: str) -> None:
    """Raise the refusal naming ``right`` unless ``grant`` includes it."""
    if right not in grant.rights:
        raise missing_right(right, resource)
