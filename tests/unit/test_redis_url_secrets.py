"""A malformed redis_url is refused without quoting its password (redis-py's own error would)."""

from __future__ import annotations

import traceback

import pytest

from bridge.errors import ConfigurationError
from bridge.redis.connection import async_client, sync_client


@pytest.mark.parametrize("factory", [sync_client, async_client])
def test_password_with_a_slash_is_refused_without_echoing_it(factory: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        factory("redis://:s3cr/et-pw@127.0.0.1:1/0")  # type: ignore[operator]
    error = caught.value
    # The message, and whatever a traceback would print of the chain (the driver's error is suppressed).
    assert "s3cr/et-pw" not in "".join(traceback.format_exception_only(error))
    assert error.__cause__ is None and error.__suppress_context__
    assert "redis_url" in str(error)
