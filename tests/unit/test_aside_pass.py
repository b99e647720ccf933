"""When the syphon's scan for lost set-aside records runs, and where it resumes (``core.aside_pass``)."""

from __future__ import annotations

import pytest

from bridge.core.aside_pass import FIRST_SEQUENCE, UNKNOWN_SERVER, ScanPass, advance, pass_for_run

DONE_ON_A = ScanPass("a", 900, complete=True)
HALFWAY_ON_A = ScanPass("a", 500)


@pytest.mark.parametrize(
    ("stored", "server", "expected"),
    [
        # no pass survived in Redis (fresh, flushed, lost with the records): a new one from the start
        (None, "a", ScanPass("a", FIRST_SEQUENCE)),
        # a complete pass on the same server: nothing to peek
        (DONE_ON_A, "a", None),
        # the server was replaced since (restart, restore, failover): a new pass from the start
        (DONE_ON_A, "b", ScanPass("b", FIRST_SEQUENCE)),
        (HALFWAY_ON_A, "b", ScanPass("b", FIRST_SEQUENCE)),
        # an incomplete pass on the same server resumes where it stopped
        (HALFWAY_ON_A, "a", HALFWAY_ON_A),
        (ScanPass("a", 0), "a", ScanPass("a", FIRST_SEQUENCE)),
        # a server that does not tell who it is: a complete pass is never trusted, an incomplete one resumes
        (ScanPass(UNKNOWN_SERVER, 7, complete=True), None, ScanPass(UNKNOWN_SERVER, FIRST_SEQUENCE)),
        (ScanPass(UNKNOWN_SERVER, 7), None, ScanPass(UNKNOWN_SERVER, 7)),
        (DONE_ON_A, None, ScanPass(UNKNOWN_SERVER, FIRST_SEQUENCE)),
    ],
)
def test_pass_for_run(stored: ScanPass | None, server: str | None, expected: ScanPass | None) -> None:
    assert pass_for_run(stored, server) == expected


@pytest.mark.parametrize(
    ("peeked", "expected"),
    [
        ([500, 501, 640], ScanPass("a", 641)),  # on past the highest number peeked
        ([640, 500], ScanPass("a", 641)),  # whatever order the page came in
        ([], ScanPass("a", 500, complete=True)),  # nothing from here on: the pass is complete
        ([499], ScanPass("a", 500, complete=True)),  # a page that does not move forward ends it
    ],
)
def test_advance(peeked: list[int], expected: ScanPass) -> None:
    assert advance(HALFWAY_ON_A, peeked) == expected


def test_a_pass_never_starts_at_zero() -> None:
    # A peek from 0 means "after the receiver's last message" to the SDK, not "from the start"
    assert FIRST_SEQUENCE >= 1
    assert pass_for_run(None, "a") == ScanPass("a", 1)
