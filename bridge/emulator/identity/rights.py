"""The three Service Bus rights and the Entra ID data roles that grant them.

Azure's built-in roles for Service Bus data access (see ``docs/references.md``): *Azure Service Bus Data
Owner* grants every right, *Data Sender* grants Send, *Data Receiver* grants Listen. A SAS rule with the
Manage claim (the namespace's ``RootManageSharedAccessKey``) grants all three.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from bridge.emulator.errors import ArgumentError


class Right(enum.Enum):
    """What an operation needs: send into an entity, listen (receive, peek, settle), or manage entities."""

    SEND = "Send"
    LISTEN = "Listen"
    MANAGE = "Manage"


OWNER = "Azure Service Bus Data Owner"
SENDER = "Azure Service Bus Data Sender"
RECEIVER = "Azure Service Bus Data Receiver"

ROLE_RIGHTS: dict[str, frozenset[Right]] = {
    OWNER: frozenset(Right),
    SENDER: frozenset({Right.SEND}),
    RECEIVER: frozenset({Right.LISTEN}),
}
# The short names the identities file accepts for the roles above.
ROLE_ALIASES = {"owner": OWNER, "sender": SENDER, "receiver": RECEIVER}
ALL_RIGHTS = frozenset(Right)


def canonical_role(name: str) -> str:
    """``sender`` or the role's full name → the full name; anything else is an error naming the choices."""
    full = ROLE_ALIASES.get(name.strip().lower(), name.strip())
    if full not in ROLE_RIGHTS:
        choices = ", ".join(sorted(ROLE_ALIASES))
        raise ArgumentError(f"unknown role {name!r}: use one of {choices} or the role's full name")
    return full


def rights_of(roles: Iterable[str]) -> frozenset[Right]:
    """The union of the rights of ``roles`` (unknown role names grant nothing)."""
    out: set[Right] = set()
    for role in roles:
        out |= ROLE_RIGHTS.get(role, frozenset())
    return frozenset(out)


def role_granting(right: Right) -> str:
    """The least role that grants ``right``: what an error tells the operator to assign."""
    return {Right.SEND: SENDER, Right.LISTEN: RECEIVER, Right.MANAGE: OWNER}[right]
