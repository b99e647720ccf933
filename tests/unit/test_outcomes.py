"""Outcomes and secret-free error descriptions."""

from __future__ import annotations

import pytest

from bridge.core.error_classes import ErrorClass, classify
from bridge.core.outcomes import MAX_ERROR_LENGTH, Outcome, describe_error, scrub_secrets
from bridge.errors import AttemptDeadlineExceeded


@pytest.mark.parametrize(
    ("text", "leaked"),
    [
        ("Endpoint=sb://ns/;SharedAccessKeyName=root;SharedAccessKey=c2VjcmV0PQ==", "c2VjcmV0PQ=="),
        ("token SharedAccessSignature sr=sb%3a%2f%2fns&sig=abc%2Bdef&se=1&skn=root failed", "abc%2Bdef"),
        ("GET https://ns/q?sig=s3cr3t&se=1", "s3cr3t"),
        ("redis://user:hunter2@127.0.0.1:6379/0 refused", "hunter2"),
    ],
)
def test_scrub_removes_credentials(text: str, leaked: str) -> None:
    assert leaked not in scrub_secrets(text)


def test_describe_error_names_the_class_and_is_bounded() -> None:
    text = describe_error(RuntimeError("x" * 1000 + " SharedAccessKey=abc"))
    assert text.startswith("RuntimeError: x")
    assert len(text) == MAX_ERROR_LENGTH
    assert describe_error(ValueError()) == "ValueError"


def test_outcome_from_a_classified_deadline() -> None:
    exc = AttemptDeadlineExceeded("no answer within 5s", namespace="primary")
    outcome = Outcome.from_classification(classify(exc), describe_error(exc))
    assert not outcome.ok
    assert outcome.failed_with is ErrorClass.OUTAGE
    assert outcome.timeout
    assert outcome.error == "AttemptDeadlineExceeded: no answer within 5s"


def test_outcome_consistency_is_enforced() -> None:
    with pytest.raises(ValueError, match="successful"):
        Outcome(ok=True, error_class=ErrorClass.OUTAGE)
    with pytest.raises(ValueError, match="error class"):
        Outcome(ok=False)
    with pytest.raises(ValueError, match="no error class"):
        _ = Outcome.success().failed_with
    assert Outcome.failure(ErrorClass.TRANSIENT).error == "transient"
