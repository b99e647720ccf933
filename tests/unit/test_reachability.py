"""The connect probe's pure decisions (``bridge.core.reachability``) and its adapter's bookkeeping with a
scripted connect (``bridge.servicebus.connect_probe``: the sockets are the integration tests' business)."""

from __future__ import annotations

import socket
import time

import pytest

from bridge.core.reachability import (
    AddressState,
    Answer,
    ProbePolicy,
    Reading,
    after_reading,
    answer_of,
    dial_address,
    needs_probe,
    refused,
    reopened,
)
from bridge.errors import EndpointRefusedError, RefusedMidAttemptError
from bridge.servicebus.connect_probe import ConnectProbe, address_of
from bridge.settings import NamespaceSettings

POLICY = ProbePolicy(after=0.05, every=0.1, refusal_stands=0.25, timeout=0.5)
KEY = "SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0"


def test_only_a_refused_connect_is_a_refusal() -> None:
    assert answer_of(None) is Answer.CONNECTED
    assert answer_of(ConnectionRefusedError) is Answer.REFUSED
    for other in (TimeoutError, OSError, ConnectionResetError, PermissionError):
        assert answer_of(other) is Answer.UNKNOWN


@pytest.mark.parametrize(
    ("endpoint", "options", "expected"),
    [
        ("ns1.servicebus.windows.net", {}, ("ns1.servicebus.windows.net", 5671)),
        ("ns1.servicebus.windows.net", {"websocket": True}, ("ns1.servicebus.windows.net", 443)),
        # The SDK uses the endpoint's port only for the development emulator (plain AMQP)
        ("127.0.0.1:5999", {"development": True}, ("127.0.0.1", 5999)),
        ("ns1.example:5999", {}, ("ns1.example", 5671)),
        ("ns1.example", {"custom_endpoint": "sb://10.0.0.4:6000"}, ("10.0.0.4", 6000)),
        ("ns1.example", {"custom_endpoint": "sb://10.0.0.4"}, ("10.0.0.4", 5671)),
        ("ns1.example", {"custom_endpoint": "10.0.0.4", "websocket": True}, ("10.0.0.4", 443)),
        ("[::1]:5999", {"development": True}, ("::1", 5999)),
        ("ns1.example", {"proxied": True, "websocket": True}, None),
    ],
)
def test_the_probed_address_is_where_the_sdk_dials(
    endpoint: str, options: dict[str, object], expected: tuple[str, int] | None
) -> None:
    arguments: dict[str, object] = {
        "websocket": False,
        "development": False,
        "custom_endpoint": None,
        "proxied": False,
        **options,
    }
    assert dial_address(endpoint, **arguments) == expected  # type: ignore[arg-type]


def test_addresses_from_settings() -> None:
    emulator = NamespaceSettings(
        connection_string=f"Endpoint=sb://127.0.0.1:5999;{KEY};UseDevelopmentEmulator=true"
    )
    azure = NamespaceSettings(connection_string=f"Endpoint=sb://ns1.servicebus.windows.net/;{KEY}")
    proxied = NamespaceSettings(
        fully_qualified_namespace="ns1.servicebus.windows.net",
        credential="azure_cli",
        proxy="http://proxy:3128",
    )
    assert address_of(emulator) == ("127.0.0.1", 5999)
    assert address_of(azure) == ("ns1.servicebus.windows.net", 5671)
    assert address_of(proxied) is None


def test_a_refusal_counts_only_from_an_address_seen_accepting_and_only_while_fresh() -> None:
    never_accepted = after_reading(AddressState(), Reading(Answer.REFUSED, 10.0))
    assert not never_accepted.armed and not refused(never_accepted, 10.0, POLICY)
    armed = after_reading(AddressState(), Reading(Answer.CONNECTED, 1.0))
    assert armed.armed
    down = after_reading(armed, Reading(Answer.REFUSED, 10.0))
    assert down.armed  # a refusal does not disarm
    assert refused(down, 10.0, POLICY) and refused(down, 10.2, POLICY)
    assert not refused(down, 10.25, POLICY)  # stale: a new probe decides
    assert not refused(down, 9.0, POLICY)  # a reading from the future (another clock) proves nothing
    unknown = after_reading(down, Reading(Answer.UNKNOWN, 11.0))
    assert not refused(unknown, 11.0, POLICY)


def test_an_armed_address_that_refuses_is_shut_until_it_accepts_again() -> None:
    refused_first = after_reading(AddressState(), Reading(Answer.REFUSED, 1.0))
    assert not refused_first.shut  # never seen accepting: its refusals prove nothing, nothing to watch
    armed = after_reading(AddressState(), Reading(Answer.CONNECTED, 1.0))
    shut = after_reading(armed, Reading(Answer.REFUSED, 2.0))
    still = after_reading(shut, Reading(Answer.REFUSED, 3.0))
    assert shut.shut and still.shut and not reopened(shut, still)
    back = after_reading(still, Reading(Answer.CONNECTED, 4.0))
    assert not back.shut and reopened(still, back)
    assert not reopened(back, after_reading(back, Reading(Answer.CONNECTED, 5.0)))  # once
    silent = after_reading(still, Reading(Answer.UNKNOWN, 4.0))
    assert not silent.shut and not reopened(still, silent)  # a blackhole ends the watch: not "back"


def test_the_probe_reports_a_shut_address_that_accepts_again_once() -> None:
    # A real listening socket stands for the namespace's address; closing it makes connects refused.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    ns = NamespaceSettings(
        connection_string=f"Endpoint=sb://127.0.0.1:{port};{KEY};UseDevelopmentEmulator=true"
    )
    probe = ConnectProbe({"primary": ns}, ProbePolicy(every=0.01))
    try:
        # Given an address seen accepting (armed), then refusing: it is shut, and not back
        probe.calibrate("primary")
        listener.close()
        time.sleep(0.02)
        assert probe.accepting_again() == []
        assert probe.shut_roles() == []  # only shut roles are probed there: nothing refused yet
        assert not probe.accepting("primary")
        assert probe.shut_roles() == ["primary"] and probe.accepting_again() == []
        # When it listens again, then the next look reports it back, once
        listener = socket.create_server(("127.0.0.1", port))
        time.sleep(0.02)
        assert probe.accepting_again() == ["primary"]
        assert probe.shut_roles() == [] and probe.accepting_again() == []
    finally:
        listener.close()


def test_a_fresh_answer_is_reused_and_a_stale_one_is_not() -> None:
    assert needs_probe(AddressState(), 0.0, POLICY)
    state = after_reading(AddressState(), Reading(Answer.CONNECTED, 5.0))
    assert not needs_probe(state, 5.05, POLICY)
    assert needs_probe(state, 5.15, POLICY)


def test_probe_times_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ProbePolicy(after=0)


class Scripted:
    """A connect whose answers are scripted; counts the connects."""

    def __init__(self) -> None:
        self.refuse = False
        self.connects = 0

    def __call__(self, address: tuple[str, int], timeout: float) -> None:
        self.connects += 1
        if self.refuse:
            raise ConnectionRefusedError(111, "Connection refused")


def make_probe(clock: list[float]) -> tuple[ConnectProbe, Scripted]:
    connect = Scripted()
    ns = NamespaceSettings(
        connection_string=f"Endpoint=sb://127.0.0.1:5999;{KEY};UseDevelopmentEmulator=true"
    )
    probe = ConnectProbe({"primary": ns, "secondary": None}, POLICY, connect=connect, clock=lambda: clock[0])
    return probe, connect


def test_the_probe_ends_a_send_only_after_the_address_was_armed() -> None:
    clock = [100.0]
    probe, connect = make_probe(clock)
    check = probe.watch("primary", "send to q")
    assert check is not None and probe.watch("secondary", "send to q") is None
    # Given an address that refuses before it was ever seen accepting: not believed
    connect.refuse = True
    assert check(1.0) is None and probe.refusing("primary", "send") is None
    # When a send was accepted: one connect arms it, later calibrations cost nothing
    connect.refuse = False
    probe.calibrate("primary")
    probe.calibrate("primary")
    assert probe.armed("primary") and connect.connects == 2
    # Then a refusal ends the running send (fate unknown) and refuses new sends while fresh
    connect.refuse = True
    clock[0] += 1.0
    error = check(1.0)
    assert isinstance(error, RefusedMidAttemptError) and error.timeout
    refusal = probe.refusing("primary", "send to q")
    assert type(refusal) is EndpointRefusedError and not refusal.timeout
    assert probe.refusals == 2
    # And a waiting send reuses the fresh answer instead of connecting again
    before = connect.connects
    assert isinstance(check(1.0), RefusedMidAttemptError) and connect.connects == before
    clock[0] += POLICY.refusal_stands
    assert probe.refusing("primary", "send") is None  # stale: the next send tries (and is watched)


@pytest.mark.parametrize("field", ["after", "every", "refusal_stands", "timeout"])
def test_every_probe_time_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=r"^probe times must be positive$"):
        ProbePolicy(**{field: 0.0})


def test_an_answer_stands_for_less_than_one_probe_interval() -> None:
    policy = ProbePolicy(every=0.05)
    state = AddressState(last=Reading(Answer.CONNECTED, 10.0))

    assert needs_probe(state, 10.04, policy) is False
    assert needs_probe(state, 10.05, policy) is True
