"""The tutorial (docs/tutorial.md) works as written: its commands, taken from the page's code blocks, run end
to end against a real ``bridge up`` stack, and the report at the end says what the page says it does.

The page's ``sh title="terminal 1"`` block (``bridge up``) runs in the background as a first terminal would;
every other ``sh`` block runs in order in one shell, as a second terminal would (the settings it loads stay
loaded); ``text`` blocks are output and are not run. Two things change, so that runs on one machine never
meet: the data folder ``/tmp/bridge`` becomes a temporary one and the ingress port 8080 a free one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from bridge.embedded.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.M | re.S)
DATA_DIR, PORT = "/tmp/bridge", "8080"


def blocks() -> tuple[list[str], list[str]]:
    """The first terminal's commands and the second's, in page order."""
    first, second = [], []
    for language, info, text in FENCE.findall(TUTORIAL.read_text()):
        if language != "sh":
            continue
        (first if 'title="terminal 1"' in info else second).append(text)
    return first, second


def localised(text: str, data_dir: Path, port: int) -> str:
    return (
        text.replace(DATA_DIR, str(data_dir))
        .replace(f":{PORT}", f":{port}")
        .replace(f"--port {PORT}", f"--port {port}")
    )


def test_the_tutorial_names_its_commands() -> None:
    first, second = blocks()
    assert first == [f"bridge up --data-dir {DATA_DIR} --port {PORT}\n"]
    script = "".join(second)
    for command in ("curl -s localhost:8080/v1/", "bridge status", "emulator-ctl outage", "bridge report"):
        assert command in script


# About 2 minutes on a quiet machine, most of it Spark's start in `bridge report`; the timeout leaves room
# for a busy one.
@pytest.mark.timeout(900)
def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "bridge", free_port()
    first, second = blocks()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "160"  # a terminal's width: `bridge status` prints its table whole
    up_log = tmp_path / "up.log"
    with up_log.open("w") as log:
        up = subprocess.Popen(
            ["bash", "-c", localised(first[0], data_dir, port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        while "Ctrl-C stops everything." not in up_log.read_text():
            assert up.poll() is None and time.monotonic() < deadline, up_log.read_text()
            time.sleep(0.5)

        # The second terminal: every block in order, stopping at the first command that fails.
        marked = [f"echo '### block {i}'\n{localised(b, data_dir, port)}" for i, b in enumerate(second)]
        shell = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", "\n".join(marked)],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        out = shell.stdout + shell.stderr
        assert shell.returncode == 0, out
        assert httpx.get(f"http://127.0.0.1:{port}/status", timeout=10).status_code == 200

        # What the page says happened did: the outage swapped orders' roles, nothing was lost.
        assert re.search(r"orders\s+│\s+passive\s+│\s+secondary", out), out
        assert re.search(r"payments\s+│\s+paired\s+│\s+secondary \(backlog\)", out), out
        summary = json.loads((data_dir / "report" / "summary.json").read_text())
        entities = summary["entities"]
        assert entities["orders"]["accepted"] == 9, summary
        assert entities["payments"]["accepted"] == 6, summary
        assert summary["lost"] == 0, summary
        assert summary["delivered"] + summary["pending"] == summary["accepted"], summary
        assert (data_dir / "report" / "report.html").is_file()
    finally:
        # Ctrl-C in the first terminal (SIGTERM here: a background job ignores SIGINT).
        os.killpg(up.pid, signal.SIGTERM)
        try:
            up.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait(10)
    assert "up stopped" in up_log.read_text()
