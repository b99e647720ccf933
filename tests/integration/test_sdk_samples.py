"""The azure-servicebus SDK's own samples run unmodified against the ``bridge up --entra`` stack (those that
sign in with SAS run against plain ``bridge up``: ``test_up_sas.py``).

``bench/samples.py`` downloads them (once per machine, into the test cache) and runs each as
``python sample.py`` in a shell that sourced the stack's ``bridge.env``. The default suite runs a short,
representative set; ``-m slow`` runs every sample that is not excluded (``docs/local-servicebus.md`` has the
table, the exclusions and the known failures).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import samples
from bridge.embedded.stack import LocalStack

# The samples dial localhost:5671 and 443: one worker runs every test that needs them, one after another.
pytestmark = pytest.mark.xdist_group("standard-ports")

# Samples that fail today, with why; the docs' table says the same. Strict: a fix makes the test say so.
KNOWN_FAILURES: dict[str, str] = {}

SLOW_FLOOR = 360.0
"""The per-sample bound under ``-m slow``; a sample that sleeps longer by design gets more
(``samples.timeout_for``)."""
SLOW_TEST_TIMEOUT = 900
"""pytest's bound for one slow sample: the longest sample's bound plus the stack's start (120 s wait for the
SDK's ports, then the stack)."""

QUICK = [s for s in samples.REPRESENTATIVE if "auto_lock_renew" not in s]
"""The representative set minus lock renewal, whose sample sleeps 280 s by design (it runs under slow)."""


@pytest.fixture(scope="module")
def sample_root() -> Path:
    return samples.samples_root()


@pytest.fixture(scope="module")
def sample_stack(
    sample_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalStack, Path]]:
    """One Entra-only stack with the entities of every sample, shared by this module's tests."""
    names = samples.all_samples(sample_root)
    try:
        with samples.entra_stack(names, tmp_path_factory.mktemp("samples")) as stack:
            yield stack
    except samples.PortsTaken as taken:
        pytest.skip(str(taken))


def _run(sample_root: Path, sample_stack: tuple[LocalStack, Path], sample: str, timeout: float) -> None:
    _, env_file = sample_stack
    bound = samples.timeout_for(sample_root, sample, timeout)
    result = samples.run_sample(sample_root, sample, env_file, samples.sample_env(sample), bound)
    assert result.result == "pass", f"{sample}: {result.detail}"


def test_exclusions_name_real_samples_and_the_representative_set_is_run(sample_root: Path) -> None:
    names = set(samples.all_samples(sample_root))
    assert names == set(samples.SAMPLES)
    assert set(samples.EXCLUDED) <= names
    assert set(samples.REPRESENTATIVE) <= names - set(samples.EXCLUDED) - set(samples.SAS_SAMPLES)
    assert set(samples.SAS_SAMPLES) <= names - set(samples.EXCLUDED)
    assert set(KNOWN_FAILURES) <= names - set(samples.EXCLUDED)


def test_each_sample_is_bounded_above_what_it_sleeps_by_design(sample_root: Path) -> None:
    """A bound below a sample's own sleeps kills it mid-sleep, which reads as a hang: the async lock-renewal
    sample sleeps 480 s, and under the former fixed 360 s bound its session part "never ended"."""
    assert samples.designed_seconds(sample_root, "async_samples/auto_lock_renew_async.py") == 480
    assert samples.designed_seconds(sample_root, "sync_samples/auto_lock_renew.py") == 280
    for sample in set(samples.SAMPLES) - set(samples.EXCLUDED):
        bound = samples.timeout_for(sample_root, sample, SLOW_FLOOR)
        assert bound >= samples.designed_seconds(sample_root, sample) + samples.WORK_MARGIN, sample
        assert bound + samples.PORT_WAIT + 60 <= SLOW_TEST_TIMEOUT, sample


@pytest.mark.timeout(300)  # the first one also waits (bounded) for 5671 and starts the stack
@pytest.mark.parametrize("sample", QUICK)
def test_representative_sample_passes(
    sample_root: Path, sample_stack: tuple[LocalStack, Path], sample: str
) -> None:
    _run(sample_root, sample_stack, sample, 90)


def _every_sample() -> list[object]:
    return [
        pytest.param(name, marks=pytest.mark.xfail(reason=KNOWN_FAILURES[name], strict=True))
        if name in KNOWN_FAILURES
        else name
        for name in samples.SAMPLES
        if name not in samples.EXCLUDED and name not in samples.SAS_SAMPLES
    ]


@pytest.mark.slow
@pytest.mark.timeout(SLOW_TEST_TIMEOUT)
@pytest.mark.parametrize("sample", _every_sample())
def test_every_sample_passes(sample_root: Path, sample_stack: tuple[LocalStack, Path], sample: str) -> None:
    _run(sample_root, sample_stack, sample, SLOW_FLOOR)
