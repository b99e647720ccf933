"""``module:function`` — how an operator names a receiver's handler on the command line.

``bridge receive orders --handler myapp.handlers:on_order`` imports ``myapp.handlers`` and calls its
``on_order`` for every message; the part after the colon may be a dotted path into the module
(``myapp.handlers:OrderHandler.handle`` for a static method, ``myapp.app:handlers.orders`` for an
attribute of an object). This module only checks and splits the text; importing is the CLI's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class HandlerSpec:
    """A parsed ``module:attribute.path``."""

    module: str
    attribute: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.module}:{'.'.join(self.attribute)}"


def parse_handler_spec(text: str) -> HandlerSpec:
    """Split ``module:attribute.path``; ``ValueError`` saying what is wrong when it is malformed."""
    module, sep, attribute = text.strip().partition(":")
    if not sep:
        raise ValueError(f"handler {text!r} must be module:function (e.g. myapp.handlers:on_order)")
    if not _DOTTED.match(module):
        raise ValueError(f"handler {text!r}: {module!r} is not a dotted module name")
    if not _DOTTED.match(attribute):
        raise ValueError(f"handler {text!r}: {attribute!r} is not a (dotted) attribute name")
    return HandlerSpec(module=module, attribute=tuple(attribute.split(".")))
