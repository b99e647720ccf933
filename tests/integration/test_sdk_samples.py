"""The azure-servicebus SDK's own samples run unmodified against the ``bridge up --entra`` stack.

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

# Samples that fail today, with why; the docs' table says the same. Strict: a fix makes the test say so.
LOCK_RENEWAL = (
    "the async sample's session part (renew the session lock for 100 s, then complete) never ends against "
    "the Entra-only stack; the same steps with a 70 s wait end, so the cause is not yet found"
)
KNOWN_FAILURES: dict[str, str] = {
    "async_samples/auto_lock_renew_async.py": LOCK_RENEWAL,
}

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
    local, env_file = sample_stack
    result = samples.run_sample(sample_root, sample, env_file, samples.sample_env(sample, local), timeout)
    assert result.result == "pass", f"{sample}: {result.detail}"


def test_exclusions_name_real_samples_and_the_representative_set_is_run(sample_root: Path) -> None:
    names = set(samples.all_samples(sample_root))
    assert names == set(samples.SAMPLES)
    assert set(samples.EXCLUDED) <= names
    assert set(samples.REPRESENTATIVE) <= names - set(samples.EXCLUDED)
    assert set(KNOWN_FAILURES) <= names - set(samples.EXCLUDED)


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
        if name not in samples.EXCLUDED
    ]


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("sample", _every_sample())
def test_every_sample_passes(sample_root: Path, sample_stack: tuple[LocalStack, Path], sample: str) -> None:
    _run(sample_root, sample_stack, sample, 360)
