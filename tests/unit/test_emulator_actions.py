"""Rule actions of the local Service Bus: the SET/REMOVE subset, as a table, and the rewritten message."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Message

from bridge.emulator.amqp.codec import with_application_properties
from bridge.emulator.entities_file import parse_entities
from bridge.emulator.errors import ArgumentError
from bridge.emulator.model.actions import compile_action, evaluate
from bridge.emulator.model.descriptions import RuleDescription, SqlRuleAction, SqlRuleFilter
from bridge.emulator.model.filters import compile_filter
from bridge.emulator.model.records import description_from_dict, description_to_dict
from bridge.errors import EmulatorError


@pytest.mark.parametrize(
    ("sql", "parameters", "properties", "updates", "removed"),
    [
        ("SET Color = 'BlueProcessed'", {}, {"Color": "Blue"}, {"Color": "BlueProcessed"}, set()),
        ("SET user.n = n + 1; SET [m] = n * 2", {}, {"n": 2}, {"n": 3, "m": 6}, set()),
        ("SET t = @tier", {"@tier": "gold"}, {}, {"t": "gold"}, set()),
        ("SET t = @TIER", {"tier": "gold"}, {}, {"t": "gold"}, set()),
        ("SET s = a + '-' + b;", {}, {"a": "x", "b": "y"}, {"s": "x-y"}, set()),
        ("SET q = 7 / 2; SET r = 7 % 4; SET f = 7.0 / 2", {}, {}, {"q": 3, "r": 3, "f": 3.5}, set()),
        ("SET missing = nothing + 1", {}, {}, {"missing": None}, set()),
        ("SET neg = -(a)", {}, {"a": 4}, {"neg": -4}, set()),
        ("SET label = sys.Label", {}, {"sys.Label": "L"}, {"label": "L"}, set()),
        ("REMOVE secret", {}, {"secret": 1}, {}, {"secret"}),
        ("SET a = 1; REMOVE a", {}, {}, {}, {"a"}),
        ("REMOVE a; SET a = 2", {}, {"a": 1}, {"a": 2}, set()),
        ("SET flag = TRUE; SET gone = NULL", {}, {}, {"flag": True, "gone": None}, set()),
    ],
)
def test_actions(
    sql: str,
    parameters: dict[str, Any],
    properties: dict[str, Any],
    updates: dict[str, Any],
    removed: set[str],
) -> None:
    changes = evaluate([compile_action(SqlRuleAction(sql, parameters))], properties)
    assert (changes.updates, changes.removed) == (updates, removed)


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("", "no statement"),
        ("UPDATE x", "expected SET or REMOVE"),
        ("SET x 1", "needs '='"),
        ("SET sys.Label = 'x'", "system property"),
        ("SET x = @nope", "parameter @nope"),
        ("SET x = (1 + 2", "missing"),
        ("SET x = 1 SET y = 2", "unexpected"),
        ("SET x = 'open", "cannot parse"),
    ],
)
def test_what_the_subset_lacks_is_refused(sql: str, reason: str) -> None:
    with pytest.raises(ArgumentError, match=reason):
        compile_action(SqlRuleAction(sql))


def test_filter_parameters_are_bound() -> None:
    predicate = compile_filter(SqlRuleFilter("a = @p AND b > @min", {"@p": "x", "@min": 1}))
    assert predicate({"a": "x", "b": 2})
    assert not predicate({"a": "x", "b": 1})
    with pytest.raises(ArgumentError, match="parameter @q"):
        compile_filter(SqlRuleFilter("a = @q", {"@p": 1}))


def test_rules_with_actions_survive_the_journal() -> None:
    rule = RuleDescription(
        "t", "s", "r", SqlRuleFilter("a = @p", {"@p": 1}), SqlRuleAction("SET b = @q", {"@q": "x"})
    )
    assert description_from_dict(description_to_dict(rule)) == rule


def test_the_codec_rewrites_only_the_application_properties() -> None:
    with_props = Message(body="body", properties={"keep": 1, "drop": 2}, subject="s")
    without = Message(body="body", subject="s")
    for message, expected in ((with_props, {"keep": 1, "new": "v"}), (without, {"new": "v"})):
        raw = bytes(message.encode())
        out = Message()
        out.decode(with_application_properties(raw, {"new": "v"}, {"drop"}))
        assert out.properties == expected
        assert (out.body, out.subject) == ("body", "s")


def test_the_entities_file_declares_parameters_and_actions() -> None:
    doc = {
        "topics": {
            "t": {
                "subscriptions": {
                    "s": {
                        "rules": {
                            "r": {
                                "sql": "n > @min",
                                "parameters": {"@min": 10},
                                "action": "SET tier = @tier",
                                "action_parameters": {"@tier": "gold"},
                            }
                        }
                    }
                }
            }
        }
    }
    rule = parse_entities(doc)[-1]
    assert rule == RuleDescription(
        "t",
        "s",
        "r",
        SqlRuleFilter("n > @min", {"@min": 10}),
        SqlRuleAction("SET tier = @tier", {"@tier": "gold"}),
    )
    doc["topics"]["t"]["subscriptions"]["s"]["rules"]["r"]["acton"] = "typo"
    with pytest.raises(EmulatorError, match="acton"):
        parse_entities(doc)
