"""Ports for test stacks: never from the range the kernel gives outgoing connections."""

from __future__ import annotations

import socket

from bridge.embedded.ports import LOWEST, _ephemeral_range, free_port


def test_a_free_port_is_below_the_kernels_ephemeral_range_and_bindable() -> None:
    low, _ = _ephemeral_range()
    ports = {free_port() for _ in range(50)}
    # Then none is a port an outgoing connection could take meanwhile, and each can be bound now
    assert all(LOWEST <= port < low for port in ports), sorted(ports)
    assert len(ports) > 40  # drawn at random, not one port again and again
    for port in list(ports)[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))
