"""Subscription rule filters: correlation filters and a SQL subset.

The SQL subset covers what routing rules use in practice: ``1=1``/``1=0``, comparisons
(``= <> != < > <= >=``) of a property with a literal (string in single quotes, number, TRUE/FALSE),
``IS [NOT] NULL``, ``AND``/``OR``/``NOT`` and parentheses. Identifiers are ``sys.<Name>`` (system
properties such as ``sys.Label``, ``sys.CorrelationId``), ``user.<name>`` or a bare ``<name>`` (both user
properties), optionally in ``[brackets]``; ``@name`` is a parameter, bound from the filter's
``parameters`` when the rule is created (an unknown one is refused). Anything else is refused when the rule
is created, with the reason, rather than silently matching everything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bridge.emulator.errors import ArgumentError
from bridge.emulator.model.descriptions import CorrelationRuleFilter, RuleFilter, SqlRuleFilter
from bridge.emulator.model.sql_tokens import Lexicon, Tokens

Predicate = Callable[[Mapping[str, Any]], bool]

_LEXICON = Lexicon(
    "SQL filter",
    operators=r"<>|!=|<=|>=|=|<|>|\(|\)",
    keywords=frozenset({"AND", "OR", "NOT", "IS", "NULL", "TRUE", "FALSE"}),
    signed_numbers=True,
)
_MISSING = object()

# Correlation filter fields → the system property they compare.
_CORRELATION_FIELDS = {
    "correlation_id": "sys.CorrelationId",
    "message_id": "sys.MessageId",
    "to": "sys.To",
    "reply_to": "sys.ReplyTo",
    "label": "sys.Label",
    "session_id": "sys.SessionId",
    "reply_to_session_id": "sys.ReplyToSessionId",
    "content_type": "sys.ContentType",
}


def compile_filter(rule_filter: RuleFilter) -> Predicate:
    """A predicate over a message's filter properties; raises ArgumentError for unsupported SQL."""
    if isinstance(rule_filter, CorrelationRuleFilter):
        return _correlation(rule_filter)
    if isinstance(rule_filter, SqlRuleFilter):
        return _SqlParser(rule_filter.sql_expression, rule_filter.parameters).parse()
    raise ArgumentError(f"unsupported filter type {type(rule_filter).__name__}")


def _correlation(flt: CorrelationRuleFilter) -> Predicate:
    wanted: dict[str, Any] = {}
    for attr, name in _CORRELATION_FIELDS.items():
        value = getattr(flt, attr)
        if value is not None:
            wanted[name] = value
    wanted.update(flt.properties)

    def predicate(props: Mapping[str, Any]) -> bool:
        return all(props.get(name, _MISSING) == value for name, value in wanted.items())

    return predicate


class _SqlParser:
    """Recursive descent: or_expr := and_expr (OR and_expr)*; and_expr := not_expr (AND not_expr)*."""

    def __init__(self, text: str, parameters: Mapping[str, Any] | None = None) -> None:
        self.parameters = {k.lstrip("@").lower(): v for k, v in (parameters or {}).items()}
        self.tokens = Tokens(text, _LEXICON)

    def parse(self) -> Predicate:
        """The whole expression as one predicate; trailing tokens are an error, not ignored."""
        if not self.tokens.items:
            raise ArgumentError("SQL filter is empty")
        pred = self._or()
        rest = self.tokens.peek()
        if rest is not None:
            raise self.tokens.fail(f"unexpected {rest[1]!r}")
        return pred

    def _or(self) -> Predicate:
        parts = [self._and()]
        while self.tokens.accept("kw", "OR"):
            parts.append(self._and())
        if len(parts) == 1:
            return parts[0]
        return lambda props: any(p(props) for p in parts)

    def _and(self) -> Predicate:
        parts = [self._not()]
        while self.tokens.accept("kw", "AND"):
            parts.append(self._not())
        if len(parts) == 1:
            return parts[0]
        return lambda props: all(p(props) for p in parts)

    def _not(self) -> Predicate:
        if self.tokens.accept("kw", "NOT"):
            inner = self._not()
            return lambda props: not inner(props)
        return self._atom()

    def _atom(self) -> Predicate:
        if self.tokens.accept("op", "("):
            inner = self._or()
            if not self.tokens.accept("op", ")"):
                raise self.tokens.fail("missing ')'")
            return inner
        left = self._operand()
        if self.tokens.accept("kw", "IS"):
            negate = self.tokens.accept("kw", "NOT")
            if not self.tokens.accept("kw", "NULL"):
                raise self.tokens.fail("IS must be followed by [NOT] NULL")
            return lambda props: (left(props) is _MISSING or left(props) is None) != negate
        kind, op = self.tokens.take()
        if kind != "op" or op in "()":
            raise self.tokens.fail(f"expected a comparison, got {op!r}")
        right = self._operand()
        return _comparison(left, op, right)

    def _operand(self) -> Callable[[Mapping[str, Any]], Any]:
        kind, value = self.tokens.take()
        if kind == "num":
            number: Any = float(value) if "." in value else int(value)
            return lambda _props: number
        if kind == "str":
            text = value[1:-1].replace("''", "'")
            return lambda _props: text
        if kind == "kw" and value in ("TRUE", "FALSE"):
            flag = value == "TRUE"
            return lambda _props: flag
        if kind == "kw" and value == "NULL":
            return lambda _props: None
        if kind == "param":
            key = value[1:].lower()
            if key not in self.parameters:
                raise self.tokens.fail(f"parameter {value} is not among its parameters")
            bound = self.parameters[key]
            return lambda _props: bound
        if kind == "ident":
            name = _property_name(value)
            return lambda props: props.get(name, _MISSING)
        raise self.tokens.fail(f"unexpected {value!r}")


def _property_name(ident: str) -> str:
    if ident.startswith("["):
        ident = ident[1:-1]
    lowered = ident.lower()
    if lowered.startswith("sys."):
        return "sys." + _system_name(ident[4:])
    if lowered.startswith("user."):
        return ident[5:]
    return ident


def _system_name(name: str) -> str:
    for canonical in _CORRELATION_FIELDS.values():
        if canonical[4:].lower() == name.lower():
            return canonical[4:]
    return name


def _comparison(
    left: Callable[[Mapping[str, Any]], Any], op: str, right: Callable[[Mapping[str, Any]], Any]
) -> Predicate:
    def predicate(props: Mapping[str, Any]) -> bool:
        a, b = left(props), right(props)
        if a is _MISSING or b is _MISSING or a is None or b is None:
            return False  # SQL: comparisons with NULL are unknown, i.e. not a match
        try:
            if op == "=":
                return bool(a == b)
            if op in ("<>", "!="):
                return bool(a != b)
            if op == "<":
                return bool(a < b)
            if op == ">":
                return bool(a > b)
            if op == "<=":
                return bool(a <= b)
            return bool(a >= b)
        except TypeError:
            return False

    return predicate
