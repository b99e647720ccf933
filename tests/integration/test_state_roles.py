"""RoleStore against a real Redis: the swap script is the compare-and-swap of ``core.roles.apply_swap``."""

from __future__ import annotations

import uuid

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.core.error_classes import ErrorClass
from bridge.core.roles import NamespaceHealth, Role, RoleState, Swap, partner
from bridge.errors import OutboxUnavailableError, StateStoreUnavailableError
from bridge.redis.connection import sync_client
from bridge.state import keys
from bridge.state.roles import RoleStore
from tests.contention import Contender, race


def swap_from(state: RoleState, at: float, reason: str = "outage") -> Swap:
    """The swap a worker decides after observing ``state``."""
    return Swap(
        from_role=state.active,
        to_role=state.backup,
        expected_epoch=state.epoch,
        new_epoch=state.epoch + 1,
        at=at,
        reason=reason,
    )


def test_unknown_entity_is_primary_at_epoch_zero(redis_client: redis.Redis) -> None:
    assert RoleStore(redis_client).get("orders") == RoleState()


def test_swap_applies_and_round_trips(redis_client: redis.Redis) -> None:
    store = RoleStore(redis_client)
    swap = swap_from(RoleState(), at=1700000000.123456789, reason="outage on primary: Connection refused ü")

    applied, state = store.swap("orders", swap)

    assert applied
    assert state == swap.state() == store.get("orders")
    assert state == RoleState(
        active="secondary", epoch=1, swapped_at=1700000000.123456789, reason=swap.reason
    )


def test_racing_workers_from_the_same_epoch_swap_exactly_once(redis_url: str) -> None:
    # Given eight workers with their own connections that all observed the same state each round
    workers = 8
    rounds = 25

    def worker(c: Contender[redis.Redis]) -> list[tuple[bool, RoleState]]:
        store = RoleStore(c.client)
        outcomes = []
        for r in range(rounds):
            observed = store.get("orders")
            c.together()  # nobody swaps before everybody has observed
            swap = swap_from(observed, at=float(r), reason=f"worker {c.index}")
            outcomes.append(store.swap("orders", swap))
            c.together()  # the next round starts from the settled state
        return outcomes

    per_worker = race(workers, lambda: sync_client(redis_url), worker)
    results = [[outcomes[r] for outcomes in per_worker] for r in range(rounds)]

    # Then every round has exactly one winner, and every loser was shown the winner's state
    for r, outcomes in enumerate(results):
        assert len(outcomes) == workers
        winners = [state for applied, state in outcomes if applied]
        assert len(winners) == 1, f"round {r}: {len(winners)} swaps applied"
        assert all(state == winners[0] for _, state in outcomes)
        assert winners[0].epoch == r + 1
    final = RoleStore(redis.Redis.from_url(redis_url)).get("orders")
    assert final.epoch == rounds
    assert final.active == ("secondary" if rounds % 2 else "primary")


def test_a_stale_epoch_never_swaps_back(redis_client: redis.Redis) -> None:
    store = RoleStore(redis_client)
    # Given a slow worker that observed the initial state (primary active, epoch 0)
    slow_view = store.get("orders")
    # and meanwhile the roles went primary -> secondary -> primary (epochs 1 and 2)
    assert store.swap("orders", swap_from(store.get("orders"), at=1.0))[0]
    assert store.swap("orders", swap_from(store.get("orders"), at=2.0))[0]
    now = store.get("orders")
    assert (now.active, now.epoch) == ("primary", 2)

    # When the slow worker acts on its stale epoch (its from_role matches the current active again)
    applied, state = store.swap("orders", swap_from(slow_view, at=3.0))

    # Then nothing changes
    assert not applied
    assert state == now == store.get("orders")


def test_matching_epoch_with_the_wrong_active_role_is_refused(redis_client: redis.Redis) -> None:
    store = RoleStore(redis_client)
    bogus = Swap("secondary", "primary", expected_epoch=0, new_epoch=1, at=1.0, reason="hand-made")
    applied, state = store.swap("orders", bogus)
    assert not applied
    assert state == RoleState()
    assert redis_client.exists(keys.role("orders")) == 0


swaps = st.builds(
    Swap,
    from_role=st.sampled_from(["primary", "secondary"]),
    to_role=st.sampled_from(["primary", "secondary"]),
    expected_epoch=st.integers(0, 4),
    new_epoch=st.integers(0, 6),
    at=st.floats(0, 2e9, allow_nan=False),
    reason=st.text(max_size=20),
)


def _compare_and_swap(current: RoleState, swap: Swap) -> tuple[bool, RoleState]:
    """The model: applied only when the stored state is still the one the swap was decided on."""
    if current.epoch != swap.expected_epoch or current.active != swap.from_role:
        return False, current
    return True, swap.state()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequence=st.lists(swaps, max_size=8))
def test_swap_script_is_a_compare_and_swap(redis_client: redis.Redis, sequence: list[Swap]) -> None:
    store = RoleStore(redis_client)
    entity = f"e-{uuid.uuid4().hex}"
    expected = RoleState()
    for swap in sequence:
        want = _compare_and_swap(expected, swap)
        assert store.swap(entity, swap) == want
        expected = want[1]
    assert store.get(entity) == expected


@pytest.mark.parametrize("role", ["primary", "secondary"])
def test_health_round_trips_and_is_replaced_whole(redis_client: redis.Redis, role: Role) -> None:
    store = RoleStore(redis_client)
    failing = NamespaceHealth(
        available=False,
        since=10.5,
        last_error="ServiceBusConnectionError: refused",
        last_error_at=10.5,
        error_class=ErrorClass.OUTAGE,
    )
    store.set_health("orders", role, failing)
    assert store.health("orders", role) == failing
    assert store.health("orders", partner(role)) == NamespaceHealth()

    # A record without error fields must not keep the old ones (absent field = None)
    store.set_health("orders", role, NamespaceHealth(available=True, since=20.0))
    assert store.health("orders", role) == NamespaceHealth(available=True, since=20.0)
    assert store.healths("orders") == {role: NamespaceHealth(True, 20.0), partner(role): NamespaceHealth()}


def test_a_health_record_is_never_replaced_by_one_of_an_older_attempt(redis_client: redis.Redis) -> None:
    store = RoleStore(redis_client)
    entity = f"e-{uuid.uuid4().hex}"
    down = NamespaceHealth(False, 20.0, "ServiceBusConnectionError: refused", 20.0, ErrorClass.OUTAGE)
    assert store.set_health(entity, "primary", down)
    # Given the namespace found down at 20, when a writer that read the record before that writes the
    # success it saw at 15 (two writers racing), then the newer failure stands
    assert not store.set_health(entity, "primary", NamespaceHealth(True, 15.0))
    assert store.health(entity, "primary") == down
    # And a success seen after it replaces it, and a record with no time at all is always written
    back = NamespaceHealth(True, 21.0, down.last_error, 20.0, ErrorClass.OUTAGE)
    assert store.set_health(entity, "primary", back)
    assert store.health(entity, "primary") == back
    assert store.set_health(entity, "primary", NamespaceHealth())
    assert store.health(entity, "primary") == NamespaceHealth()


def test_redis_down_is_a_bridge_error_without_the_password(redis_server: object) -> None:
    from bridge.embedded.ports import free_port

    client = sync_client(f"redis://:s3cretpass@127.0.0.1:{free_port()}/0")
    with pytest.raises(StateStoreUnavailableError) as caught:
        RoleStore(client).get("orders")
    assert not isinstance(caught.value, OutboxUnavailableError)  # a role read is no outbox write
    assert "s3cretpass" not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
