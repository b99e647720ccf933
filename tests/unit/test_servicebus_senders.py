"""The senders a role's client keeps: the ``max_senders`` paths used last, never one a call is using.

No network: building the SDK client and its senders does no I/O (links open on first use), and closing an
unopened sender sends nothing. The SDK gives every opened sender a keep-alive thread, so an unbounded cache
made a worker's threads grow with the number of entities it ever sent to.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from bridge.servicebus.clients import RoleClient
from bridge.settings import NamespaceSettings, RetrySettings

CONNECTION = (
    "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0;UseDevelopmentEmulator=true"
)


@pytest.fixture
def client() -> Iterator[RoleClient]:
    namespace = NamespaceSettings(connection_string=SecretStr(CONNECTION))
    role = RoleClient.open("primary", 1, namespace, RetrySettings(), 1.0, max_senders=3)
    try:
        yield role
    finally:
        role.close()


def test_only_the_paths_used_last_keep_a_sender(client: RoleClient) -> None:
    # Given senders for a, b and c, and a used again
    first = client.sender("a")
    for path in ("b", "c", "a"):
        client.sender(path)
    # When a fourth path gets one
    client.sender("d")
    # Then the least recently used (b) was closed and dropped; a is the same sender as before
    assert list(client.senders) == ["c", "a", "d"]
    assert client.sender("a") is first


def test_a_sender_whose_path_a_call_holds_is_never_closed(client: RoleClient) -> None:
    for path in ("a", "b", "c"):
        client.sender(path)
    held = client.locks.setdefault("send:a", threading.Lock())
    # Given a call holding path a's lock (a send on it in progress)
    with held:
        # When two more paths get senders
        client.sender("d")
        client.sender("e")
    # Then the free least recently used ones went, a stayed (the bound is kept by the others)
    assert list(client.senders) == ["a", "d", "e"]
