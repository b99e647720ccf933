"""One Spark session for every ledger test (starting a JVM costs seconds), on ``local[2]``; and a Spark
standalone cluster on loopback for the tests that run the ledger's commands on one."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.embedded.ports import free_port

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


# ---- a standalone cluster on loopback ----------------------------------------------------------------------
def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    """A Spark master and one worker (1 core, 1 GB) on loopback, from pyspark's own launcher."""
    port = free_port()
    env = dict(
        os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path), SPARK_WORKER_DIR=str(tmp_path)
    )
    spark_class = str(_spark_class())
    logs = [open(tmp_path / f"{name}.log", "wb") for name in ("master", "worker")]  # noqa: SIM115
    master = subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", "0"],
        env=env, stdout=logs[0], stderr=subprocess.STDOUT,
    )  # fmt: skip
    processes = [master]
    try:
        _wait_port(port)
        worker = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
             "127.0.0.1", "--webui-port", "0", "--cores", "1", "--memory", "1g", "--work-dir", str(tmp_path)],
            env=env, stdout=logs[1], stderr=subprocess.STDOUT,
        )  # fmt: skip
        processes.append(worker)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in logs:
            log.close()
