"""The one tokenizer of the local Service Bus's two SQL grammars: rule filters and rule actions.

Both grammars share their literals (``'text'`` with ``''`` for a quote, numbers), ``@parameters`` and
identifiers (``[bracketed]`` or dotted names); each names its own operators and keywords (a ``Lexicon``),
and keywords are matched case-insensitively and handed on upper-cased. ``Tokens`` is the cursor both
recursive-descent parsers read with (``peek``, ``take``, ``accept``), and words their errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bridge.emulator.errors import ArgumentError

Token = tuple[str, str]
"""``(kind, value)``: kind is ``num``, ``str``, ``op``, ``param``, ``ident`` or ``kw``."""


@dataclass(frozen=True)
class Lexicon:
    """What one grammar's text may contain, and how its errors name it."""

    label: str
    """How an error names the text: ``SQL filter``, ``SqlRuleAction``."""
    operators: str
    """The operators, as a regular-expression alternation (longest first)."""
    keywords: frozenset[str]
    signed_numbers: bool = False
    """A ``-`` directly before a number belongs to the number (filters' literals)."""
    shown: int | None = None
    """How much of the text an error quotes (None: all of it)."""
    pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        sign = "-?" if self.signed_numbers else ""
        pattern = re.compile(
            rf"\s*(?:(?P<num>{sign}\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op>{self.operators})"
            r"|(?P<param>@[A-Za-z_][A-Za-z0-9_]*)|(?P<ident>\[[^\]]+\]|[A-Za-z_][A-Za-z0-9_.$-]*))"
        )
        object.__setattr__(self, "pattern", pattern)

    def error(self, text: str, reason: str) -> ArgumentError:
        """``<label> <text>: <reason>``, the text cut to ``shown``."""
        quoted = text if self.shown is None else text[: self.shown]
        return ArgumentError(f"{self.label} {quoted!r}: {reason}")


def tokenize(text: str, lexicon: Lexicon) -> list[Token]:
    """``text`` as tokens; raises ``ArgumentError`` at the first character no token starts with."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(text) and text[pos:].strip():
        match = lexicon.pattern.match(text, pos)
        if not match:
            raise lexicon.error(text, f"cannot parse near {text[pos : pos + 20]!r}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind == "ident" and value.upper() in lexicon.keywords:
            kind, value = "kw", value.upper()
        tokens.append((kind, value))
        pos = match.end()
    return tokens


class Tokens:
    """A parser's cursor over the tokens of ``text``."""

    def __init__(self, text: str, lexicon: Lexicon) -> None:
        self.text = text
        self.lexicon = lexicon
        self.items = tokenize(text, lexicon)
        self.pos = 0

    def fail(self, reason: str) -> ArgumentError:
        """The error to raise for ``reason``, naming the text."""
        return self.lexicon.error(self.text, reason)

    def peek(self) -> Token | None:
        """The next token, not taken; None at the end."""
        return self.items[self.pos] if self.pos < len(self.items) else None

    def take(self) -> Token:
        """The next token, taken; the end is an error."""
        token = self.peek()
        if token is None:
            raise self.fail("unexpected end")
        self.pos += 1
        return token

    def accept(self, kind: str, value: str) -> bool:
        """Take the next token if it is ``(kind, value)``."""
        if self.peek() == (kind, value):
            self.pos += 1
            return True
        return False
