"""Rule actions: the ``SET``/``REMOVE`` statements of a ``SqlRuleAction``, applied to a subscription's copy.

Service Bus's SQL action grammar (see ``docs/references.md``) is statements separated by ``;``::

    SET <property> = <expression>
    REMOVE <property>

The subset here: properties are application properties — ``user.<name>``, a bare ``<name>`` or
``[<name>]``; ``sys.<Name>`` may be read in an expression but not set or removed (refused when the rule is
created). Expressions are literals (``'text'`` with ``''`` for a quote, numbers, ``TRUE``/``FALSE``,
``NULL``), properties, ``@parameters`` from the action's ``parameters``, ``+ - * / %`` (``+`` joins
strings) and parentheses. A property an expression reads that the message lacks makes the result NULL,
and ``SET x = NULL`` stores a null value, as on Azure.

``compile_action`` parses once when the rule is created; ``evaluate`` runs the statements of several
actions in order over the message's properties and returns what to set and what to remove. Rewriting the
encoded message is the codec's job (``Namespace`` is given it), so this module stays free of AMQP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.emulator.model.descriptions import SqlRuleAction
from bridge.emulator.model.sql_tokens import Lexicon, Tokens

Expression = Callable[[Mapping[str, Any]], Any]

_LEXICON = Lexicon(
    "SqlRuleAction",
    operators=r"[-+*/%=();]",
    keywords=frozenset({"SET", "REMOVE", "TRUE", "FALSE", "NULL"}),
    shown=100,
)
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Statement:
    """One ``SET`` (with its expression) or ``REMOVE`` of a property."""

    name: str
    value: Expression | None  # None: REMOVE


@dataclass(frozen=True, slots=True)
class Action:
    """A compiled rule action."""

    statements: tuple[Statement, ...]


@dataclass(slots=True)
class Changes:
    """What the actions do to a message's application properties."""

    updates: dict[str, Any] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)


def compile_action(action: SqlRuleAction) -> Action:
    """Parse ``action``; ArgumentError (with the reason) for anything outside the subset."""
    return Action(_Parser(action.sql_expression, action.parameters).statements())


def evaluate(actions: Sequence[Action], properties: Mapping[str, Any]) -> Changes:
    """Run every statement in order; later statements see what earlier ones set."""
    current = dict(properties)
    changes = Changes()
    for action in actions:
        for statement in action.statements:
            if statement.value is None:
                current.pop(statement.name, None)
                changes.updates.pop(statement.name, None)
                changes.removed.add(statement.name)
            else:
                value = statement.value(current)
                value = None if value is _MISSING else value
                current[statement.name] = value
                changes.updates[statement.name] = value
                changes.removed.discard(statement.name)
    return changes


class _Parser:
    def __init__(self, text: str, parameters: Mapping[str, Any]) -> None:
        self.parameters = {k.lstrip("@").lower(): v for k, v in parameters.items()}
        self.tokens = Tokens(text, _LEXICON)

    def statements(self) -> tuple[Statement, ...]:
        out: list[Statement] = []
        while self.tokens.peek() is not None:
            if self.tokens.accept("op", ";"):
                continue
            kind, word = self.tokens.take()
            if (kind, word) == ("kw", "SET"):
                name = self._target()
                if not self.tokens.accept("op", "="):
                    raise self.tokens.fail(f"SET {name} needs '='")
                out.append(Statement(name, self._sum()))
            elif (kind, word) == ("kw", "REMOVE"):
                out.append(Statement(self._target(), None))
            else:
                raise self.tokens.fail(f"expected SET or REMOVE, got {word!r}")
            if self.tokens.peek() is not None and not self.tokens.accept("op", ";"):
                raise self.tokens.fail(f"unexpected {self.tokens.peek()[1]!r}")  # type: ignore[index]
        if not out:
            raise self.tokens.fail("no statement")
        return tuple(out)

    def _target(self) -> str:
        kind, ident = self.tokens.take()
        if kind != "ident":
            raise self.tokens.fail(f"expected a property name, got {ident!r}")
        name = _name(ident)
        if name.lower().startswith("sys."):
            raise self.tokens.fail(
                f"{ident} is a system property; the local Service Bus sets user properties only"
            )
        return name

    def _sum(self) -> Expression:
        left = self._product()
        while (token := self.tokens.peek()) is not None and token[0] == "op" and token[1] in "+-":
            self.tokens.take()
            left = _binary(left, token[1], self._product())
        return left

    def _product(self) -> Expression:
        left = self._factor()
        while (token := self.tokens.peek()) is not None and token[0] == "op" and token[1] in "*/%":
            self.tokens.take()
            left = _binary(left, token[1], self._factor())
        return left

    def _factor(self) -> Expression:
        kind, value = self.tokens.take()
        if (kind, value) == ("op", "("):
            inner = self._sum()
            if not self.tokens.accept("op", ")"):
                raise self.tokens.fail("missing ')'")
            return inner
        if (kind, value) == ("op", "-"):
            operand = self._factor()
            return lambda props: _negate(operand(props))
        if kind == "num":
            number: Any = float(value) if "." in value else int(value)
            return lambda _props: number
        if kind == "str":
            text = value[1:-1].replace("''", "'")
            return lambda _props: text
        if kind == "kw" and value in ("TRUE", "FALSE", "NULL"):
            constant = {"TRUE": True, "FALSE": False, "NULL": None}[value]
            return lambda _props: constant
        if kind == "param":
            key = value[1:].lower()
            if key not in self.parameters:
                raise self.tokens.fail(f"parameter {value} is not among the action's parameters")
            bound = self.parameters[key]
            return lambda _props: bound
        if kind == "ident":
            name = _name(value)
            if name.lower().startswith("sys."):
                name = "sys." + name[4:]
            return lambda props: props.get(name, _MISSING)
        raise self.tokens.fail(f"unexpected {value!r}")


def _name(ident: str) -> str:
    if ident.startswith("["):
        ident = ident[1:-1]
    return ident[5:] if ident.lower().startswith("user.") else ident


def _negate(value: Any) -> Any:
    if value is _MISSING or value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return _MISSING
    return -value


def _binary(left: Expression, op: str, right: Expression) -> Expression:
    def apply(props: Mapping[str, Any]) -> Any:
        a, b = left(props), right(props)
        if a is _MISSING or b is _MISSING or a is None or b is None:
            return _MISSING
        if op == "+" and isinstance(a, str) and isinstance(b, str):
            return a + b
        if isinstance(a, bool) or isinstance(b, bool):
            return _MISSING
        if not isinstance(a, int | float) or not isinstance(b, int | float):
            return _MISSING
        try:
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "%":
                return a % b
            return a // b if isinstance(a, int) and isinstance(b, int) else a / b
        except ZeroDivisionError:
            return _MISSING

    return apply
