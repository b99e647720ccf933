"""``bridge.redis``: the one script runner (blocking and asyncio) and the error translation, on real Redis."""

from __future__ import annotations

import asyncio

import pytest
import redis

from bridge.embedded.ports import free_port
from bridge.errors import BackpressureError, OutboxUnavailableError, StateStoreUnavailableError
from bridge.redis.connection import async_client, sync_client
from bridge.redis.errors import driver_errors
from bridge.redis.scripts import LuaScript, run_script, run_script_async

ECHO = LuaScript("#!lua\nredis.call('SET', KEYS[1], ARGV[1])\nreturn {KEYS[1], ARGV[1]}\n")


def test_the_sha_is_the_one_redis_computes(redis_client: redis.Redis):
    assert redis_client.script_load(ECHO.text) == ECHO.sha


def test_noscript_loads_the_script_and_runs_it_once(redis_url: str, redis_client: redis.Redis):
    client = sync_client(redis_url)
    try:
        # Given a server that does not know the script (fresh start, failover, SCRIPT FLUSH)
        redis_client.script_flush()
        # When it is run, blocking and then asyncio (after another flush)
        assert run_script(client, ECHO, ["k"], ["v1"]) == [b"k", b"v1"]
        # Then it ran once and stays loaded for every later caller
        assert redis_client.script_exists(ECHO.sha) == [True]
        redis_client.script_flush()

        async def run() -> object:
            aclient = async_client(redis_url)
            try:
                return await run_script_async(aclient, ECHO, ["k"], [b"v2"])
            finally:
                await aclient.aclose()

        assert asyncio.run(run()) == [b"k", b"v2"]
        assert redis_client.get("k") == b"v2"
        assert redis_client.script_exists(ECHO.sha) == [True]
    finally:
        client.close()


def test_a_script_error_is_the_neutral_error(redis_url: str):
    failing = LuaScript("#!lua\nreturn redis.error_reply('nope')\n")
    client = sync_client(redis_url)
    try:
        with pytest.raises(StateStoreUnavailableError) as caught, driver_errors():
            run_script(client, failing, [], [])
        assert "ResponseError" in str(caught.value)
    finally:
        client.close()


def test_unreachable_is_the_neutral_error_unless_the_outbox_asks(redis_url: str):
    url = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    client = sync_client(url)
    with pytest.raises(StateStoreUnavailableError) as neutral, driver_errors():
        client.get("x")
    assert type(neutral.value) is StateStoreUnavailableError
    with pytest.raises(OutboxUnavailableError) as outbox, driver_errors(OutboxUnavailableError):
        client.get("x")
    for caught in (neutral, outbox):
        assert "s3cret" not in str(caught.value)
        assert caught.value.__suppress_context__

    async def awaited() -> None:
        aclient = async_client(url)
        try:
            with driver_errors():
                await aclient.get("x")
        finally:
            await aclient.aclose()

    with pytest.raises(StateStoreUnavailableError):
        asyncio.run(awaited())


def test_out_of_memory_is_backpressure(redis_url: str, redis_client: redis.Redis):
    client = sync_client(redis_url)
    redis_client.config_set("maxmemory", 1)
    try:
        with pytest.raises(BackpressureError), driver_errors():
            run_script(client, ECHO, ["k"], ["v"])
        assert redis_client.exists("k") == 0
    finally:
        redis_client.config_set("maxmemory", 0)
        client.close()
