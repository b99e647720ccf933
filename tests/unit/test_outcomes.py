"""Outcomes and secret-free error descriptions."""

from __future__ import annotations

import pytest

from bridge.core.error_classes import Classification, ErrorClass, classify
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


def test_a_failure_carries_only_the_flags_it_was_given() -> None:
    assert Outcome.failure(ErrorClass.TRANSIENT, "busy") == Outcome(False, ErrorClass.TRANSIENT, "busy")
    refused = Classification(ErrorClass.OUTAGE, entity_missing=True, address_refused=True)
    assert Outcome.from_classification(refused, "gone") == Outcome(
        False, ErrorClass.OUTAGE, "gone", entity_missing=True, address_refused=True
    )


def test_an_outcome_refuses_a_class_that_contradicts_it() -> None:
    with pytest.raises(ValueError, match=r"^a successful outcome has no error class$"):
        Outcome(True, ErrorClass.TRANSIENT)
    with pytest.raises(ValueError, match=r"^a failed outcome needs an error class$"):
        Outcome(False)


def test_a_description_of_exactly_the_limit_is_kept_whole() -> None:
    text = describe_error(ValueError("x" * (MAX_ERROR_LENGTH - len("ValueError: "))))

    assert len(text) == MAX_ERROR_LENGTH
    assert text.endswith("xxx")


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("Endpoint=sb://ns/;SharedAccessKey=c2VjcmV0PQ==;x", "Endpoint=sb://ns/;SharedAccessKey=***;x"),
        ("token SharedAccessSignature sr=a&sig=b&se=1 failed", "token SharedAccessSignature *** failed"),
        ("GET https://ns/q?sig=s3cr3t&se=1", "GET https://ns/q?sig=***&se=1"),
        ("redis://user:hunter2@host:6379/0 refused", "redis://user:***@host:6379/0 refused"),
        ("token eyJhbGci.eyJzdWIi.c2ln expired", "token *** expired"),
        ("Authorization: Bearer abc.def", "Authorization: Bearer ***"),
        ("client_secret=s3cr3t&scope=x", "client_secret=***&scope=x"),
    ],
)
def test_each_kind_of_credential_is_replaced_in_place(text: str, scrubbed: str) -> None:
    assert scrub_secrets(text) == scrubbed
