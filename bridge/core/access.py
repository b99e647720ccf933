"""Which Service Bus right an operation lacked, and which Entra ID role grants it.

Service Bus refuses a signed-in identity that lacks a right with ``Unauthorized access. '<Right>' claim(s)
are required to perform this operation.`` (AMQP ``amqp:unauthorized-access``, HTTP 401), whatever the
operation. ``missing_right`` reads the right out of such a text; ``ROLE_FOR_RIGHT`` is the built-in role to
assign (docs/references.md, "Microsoft Entra ID"). Pure: no I/O.
"""

from __future__ import annotations

import re

ROLE_FOR_RIGHT = {
    "Send": "Azure Service Bus Data Sender",
    "Listen": "Azure Service Bus Data Receiver",
    "Manage": "Azure Service Bus Data Owner",
}
_CLAIM = re.compile(r"'(Send|Listen|Manage)' claim\(s\) (?:are|is) required", re.IGNORECASE)


def missing_right(text: str) -> str | None:
    """``Send``/``Listen``/``Manage`` when ``text`` is Service Bus refusing for want of that right."""
    found = _CLAIM.search(text)
    return found.group(1).capitalize() if found else None


def role_advice(right: str) -> str:
    """What an operator should do about a missing ``right``."""
    role = ROLE_FOR_RIGHT.get(right, "a Service Bus data role")
    owner = "" if right == "Manage" else " (or Data Owner)"
    return f"the identity lacks the {right!r} right: assign it the {role!r} role{owner}"
