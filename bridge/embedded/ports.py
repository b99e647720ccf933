"""Free loopback ports."""

from __future__ import annotations

import random
import socket
import time
from pathlib import Path

LOWEST = 10_000
"""The lowest port ``free_port`` hands out (below it: well-known and registered services' usual ports)."""


def _ephemeral_range() -> tuple[int, int]:
    """The range the kernel takes outgoing connections' local ports from (Linux's default if unknown)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now, for a process that binds it a few seconds later.

    Not one the kernel would pick itself: a port from its ephemeral range (what ``bind(0)`` returns) is
    also the local port of the next outgoing connections, and one of them took it before a worker bound
    its metrics port (EADDRINUSE, a flake seen with two stacks in parallel). A random port below that
    range, checked by binding it, collides only with another caller that drew the same one.
    """
    low, _ = _ephemeral_range()
    high = max(LOWEST + 1000, low)
    rand = random.SystemRandom()
    for _ in range(200):
        port = rand.randrange(LOWEST, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a crowded range: the kernel's pick
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_listening(host: str, port: int, timeout: float) -> bool:
    """True once a TCP connect to ``host:port`` succeeds, False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False
