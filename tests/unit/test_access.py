"""What an operator is told about a missing Service Bus right (``bridge.core.access``)."""

from __future__ import annotations

import pytest

from bridge.core.access import missing_right, role_advice


@pytest.mark.parametrize(
    ("right", "advice"),
    [
        (
            "Send",
            "the identity lacks the 'Send' right: assign it the 'Azure Service Bus Data Sender' role"
            " (or Data Owner)",
        ),
        (
            "Listen",
            "the identity lacks the 'Listen' right: assign it the 'Azure Service Bus Data Receiver' role"
            " (or Data Owner)",
        ),
        (
            "Manage",
            "the identity lacks the 'Manage' right: assign it the 'Azure Service Bus Data Owner' role",
        ),
    ],
)
def test_the_advice_names_the_role_that_grants_the_right(right: str, advice: str) -> None:
    assert role_advice(right) == advice


def test_the_right_is_read_from_the_refusal_text() -> None:
    text = "Unauthorized access. 'listen' claim(s) are required to perform this operation."

    assert missing_right(text) == "Listen"
    assert missing_right("Unauthorized access.") is None
