"""The images' HEALTHCHECK: is the process in this container answering?

What to probe comes from the environment, because one image runs several commands: ``HEALTHCHECK_URL``
(``http://...`` must answer 2xx, ``tcp://host:port`` must accept a connection), else the metrics port that
a worker, beat or receiver serves (``BRIDGE_METRICS_PORT``). With neither there is nothing to probe and the
check passes: the container's own exit is then the only signal. Standard library only, so it runs in either
image without the project's virtualenv.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT = 3.0


def target() -> str | None:
    """The URL to probe, or None when this container serves nothing probeable."""
    url = os.environ.get("HEALTHCHECK_URL")
    if url:
        return url
    port = os.environ.get("BRIDGE_METRICS_PORT")
    return f"http://127.0.0.1:{port}/metrics" if port else None


def probe(url: str) -> str | None:
    """None when healthy, else why not."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "tcp":
        try:
            with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 0), TIMEOUT):
                return None
        except OSError as exc:
            return f"{url}: {exc}"
    if parts.scheme not in ("http", "https"):
        return f"{url}: HEALTHCHECK_URL must be http://, https:// or tcp://"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:  # noqa: S310 (scheme checked above)
            return None if 200 <= response.status < 300 else f"{url}: HTTP {response.status}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {exc}"


def main() -> int:
    url = target()
    if url is None:
        return 0
    problem = probe(url)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
