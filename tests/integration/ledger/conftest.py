"""One Spark session for every ledger test (starting a JVM costs seconds), on ``local[2]``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

JAVA_CANDIDATES = ("/usr/lib/jvm/java-17-openjdk-amd64", "/usr/lib/jvm/default-java")


def _java_home() -> str | None:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    return next((path for path in JAVA_CANDIDATES if Path(path, "bin", "java").exists()), None)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's Spark (the ledger's own builder, so the tests run the configuration users get)."""
    java = _java_home()
    if java is None:
        pytest.fail("no Java runtime for PySpark (./scripts/bootstrap installs one)")
    os.environ["JAVA_HOME"] = java
    from bridge.ledger.spark import build_session

    session = build_session("local[2]", "1g", shuffle_partitions=4)
    try:
        yield session
    finally:
        session.stop()
