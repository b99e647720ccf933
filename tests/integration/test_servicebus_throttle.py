"""The bridge's Service Bus adapter under Service Bus's throttling shape (a penalty window).

While the namespace's penalty window is open every send is refused with ServerBusy; the pool reports it as
a transient failure of those messages (the outbox retries them later), keeps its client, and sends again
once the window has passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from bridge.core.envelope import Envelope
from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import TransientNamespaceError
from bridge.servicebus.messages import to_message
from tests.integration.servicebus_support import drain, pool_for

pytestmark = pytest.mark.timeout(120)

WINDOW = 1.5


def test_a_pool_rides_out_a_penalty_window(namespace_factory: Callable[..., LocalNamespace]) -> None:
    ns = namespace_factory("throttled", auto_create=True)
    with pool_for(ns, attempt_deadline=10) as pool:

        def send(index: int) -> dict[int, object]:
            envelope = Envelope(entity="q1", message_id=f"m-{index}", body=b"x", accepted_at=time.time())
            return dict(pool.send("primary", "q1", [to_message(envelope)]).failed)

        assert send(0) == {}
        generation = pool.generation("primary")
        # Given a throttle that trips on every request, for a window
        ns.control.throttle(window=WINDOW, probability=1.0)
        # When the pool sends inside it, Then the message fails as transient (to be retried), not for good
        failed = send(1)
        assert isinstance(failed[0], TransientNamespaceError), failed
        # And once the throttle is lifted and its window has passed, the same client sends again
        ns.control.restore()
        time.sleep(WINDOW)
        assert send(2) == {}
        assert pool.generation("primary") == generation
    assert [m.message_id for m in drain(ns, "q1", 3)] == ["m-0", "m-2"]
