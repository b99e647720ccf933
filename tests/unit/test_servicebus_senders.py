"""The senders a role's client keeps: the ``max_senders`` paths used last, never one a call is using.

No network: building the SDK client and its senders does no I/O (links open on first use), and closing an
unopened sender sends nothing. The SDK gives every opened sender a keep-alive thread, so an unbounded cache
made a worker's threads grow with the number of entities it ever sent to.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from bridge.servicebus.clients import RoleClient
from bridge.servicebus.path_locks import PathLocks
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
    # Given a call holding path a's lock (a send on it in progress)
    with client.locks.held("send:a"):
        # When two more paths get senders
        client.sender("d")
        client.sender("e")
    # Then the free least recently used ones went, a stayed (the bound is kept by the others)
    assert list(client.senders) == ["a", "d", "e"]


def test_a_sender_left_unused_is_closed_with_everything_kept_for_its_path(client: RoleClient) -> None:
    # Given senders for a and b, b wanted again later
    for path in ("a", "b"):
        client.sender(path)
    client.sent_at["a"] -= 10
    # When the senders unused for 5 s are closed
    closed = client.close_idle(time.monotonic(), after=5)
    # Then a went, with its times and lock; b stays
    assert closed == ["a"]
    assert list(client.senders) == ["b"]
    assert set(client.sent_at) == set(client.last_used) == {"b"}
    assert len(client.locks) == 0


def test_an_unused_sender_whose_path_a_call_holds_is_not_closed(client: RoleClient) -> None:
    client.sender("a")
    client.sent_at["a"] -= 10
    with client.locks.held("send:a"):
        assert client.close_idle(time.monotonic(), after=5) == []
    assert list(client.senders) == ["a"]
    assert client.close_idle(time.monotonic(), after=5) == ["a"]


def test_path_locks_exist_only_while_held_or_waited_for() -> None:
    locks = PathLocks()
    got: list[bool] = []
    # Given one thread holding a path and another waiting for it
    locks.acquire("send:a")
    waiter = threading.Thread(target=lambda: got.append(locks.acquire("send:a", 5)))
    waiter.start()
    while not got and locks._entries["send:a"].users < 2:
        time.sleep(0.01)
    # When the holder lets go, the waiter gets the same lock; a try meanwhile fails
    assert not locks.acquire("send:a", 0)
    locks.release("send:a")
    waiter.join(5)
    assert got == [True]
    assert locks.busy("send:a")
    # Then once the waiter lets go too, nothing is kept for the path
    locks.release("send:a")
    assert len(locks) == 0 and not locks.busy("send:a")
