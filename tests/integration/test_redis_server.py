"""The private redis-server the test rig and ``bridge demo`` start: port, AOF, crash safety, clean-up."""

from __future__ import annotations

import shutil
import socket
import textwrap
from pathlib import Path

import pytest
import redis

from bridge.embedded.redis_server import WAITAOF_VERSION, RedisServer, redis_server_binary, server_version
from bridge.errors import EmulatorError

ROOT = Path(__file__).resolve().parents[2]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _config(server: RedisServer, name: str) -> str:
    client = redis.Redis(port=server.port, decode_responses=True, socket_timeout=5)
    try:
        return str(client.config_get(name)[name])
    finally:
        client.close()


def test_starts_on_a_free_private_port_with_aof_in_its_own_dir() -> None:
    with RedisServer() as server:
        assert server.port != 6379
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        assert server.running
        assert _config(server, "appendonly") == "yes"
        assert _config(server, "appendfsync") == "always"
        assert Path(_config(server, "dir")).resolve() == server.data_dir.resolve()
        assert server.data_dir.name.startswith("bridge-redis-")


def test_acknowledged_write_survives_kill_9_and_restart() -> None:
    with RedisServer() as server:
        # Given: a write Redis acknowledged (appendfsync always: on disk before the reply)
        client = redis.Redis(port=server.port, socket_timeout=5)
        assert client.xadd("outbox:orders", {"body": b"x" * 100}) is not None
        assert client.set("acked", "yes")
        client.close()
        # When: the process is killed without any chance to flush, then started again
        server.kill()
        assert not server.running
        assert not _listening(server.port)
        server.start()
        # Then: the write is still there
        client = redis.Redis(port=server.port, socket_timeout=5)
        try:
            assert client.get("acked") == b"yes"
            assert client.xlen("outbox:orders") == 1
        finally:
            client.close()


def test_restart_keeps_port_and_data_dir() -> None:
    with RedisServer() as server:
        port, data_dir = server.port, server.data_dir
        server.restart(hard=True)
        assert (server.port, server.data_dir) == (port, data_dir)
        assert _listening(port)


def test_close_stops_the_process_and_removes_its_data_dir() -> None:
    server = RedisServer().start()
    data_dir, port = server.data_dir, server.port
    assert (data_dir / "redis.log").exists()
    server.close()
    assert not server.running
    assert not _listening(port)
    assert not data_dir.exists()


def test_close_keeps_a_data_dir_the_caller_owns(tmp_path: Path) -> None:
    with RedisServer(data_dir=tmp_path / "redis") as server:
        assert server.data_dir == tmp_path / "redis"
    assert (tmp_path / "redis" / "redis.log").exists()


def test_exception_inside_with_block_still_cleans_up() -> None:
    with pytest.raises(RuntimeError), RedisServer() as server:
        data_dir, port = server.data_dir, server.port
        raise RuntimeError("test body failed")
    assert not _listening(port)
    assert not data_dir.exists()


def test_two_servers_run_side_by_side_without_sharing_data() -> None:
    with RedisServer() as first, RedisServer() as second:
        assert first.port != second.port
        assert first.data_dir != second.data_dir
        a = redis.Redis(port=first.port, socket_timeout=5)
        b = redis.Redis(port=second.port, socket_timeout=5)
        try:
            a.set("who", "first")
            b.set("who", "second")
            assert a.get("who") == b"first"
            assert b.get("who") == b"second"
        finally:
            a.close()
            b.close()


def test_refuses_to_pass_off_another_server_on_its_port_as_its_own() -> None:
    with RedisServer() as theirs:
        # Given: the port is taken (as if someone grabbed it after free_port() chose it)
        ours = RedisServer(port=theirs.port)
        # When/Then: our start fails loudly instead of handing out the other server's URL
        with pytest.raises(EmulatorError, match="another process"):
            ours.start()
        assert not ours.running
        ours.close()
        assert theirs.running
        assert _listening(theirs.port)


def test_start_while_running_does_not_spawn_a_second_process() -> None:
    with RedisServer() as server:
        server.start()
        client = redis.Redis(port=server.port, socket_timeout=5)
        try:
            assert int(client.info("server")["process_id"]) == server._proc.pid  # type: ignore[union-attr]
        finally:
            client.close()


# The two tests below run in this order on one worker: the second proves the first's key was flushed.
@pytest.mark.xdist_group("session-fixture-flush")
def test_session_fixture_gives_each_test_an_empty_private_database(
    redis_server: RedisServer, redis_url: str, redis_client: redis.Redis
) -> None:
    assert redis_server.port != 6379
    assert redis_url == redis_server.url
    assert redis_client.dbsize() == 0
    # Left behind on purpose: the next fixture use must flush it (see the test below).
    redis_client.set("left-behind", "1")


@pytest.mark.xdist_group("session-fixture-flush")
def test_session_fixture_flushes_between_tests(redis_client: redis.Redis) -> None:
    assert redis_client.get("left-behind") is None
    assert redis_client.dbsize() == 0


def test_session_fixture_stops_redis_even_when_tests_fail(pytester: pytest.Pytester) -> None:
    # Given: an inner session that uses the shared fixtures, records its server and then fails
    record = pytester.path / "server.txt"
    pytester.makeconftest("from tests.conftest import redis_client, redis_server, redis_url\n")
    pytester.makepyfile(
        test_inner=textwrap.dedent(
            f"""
            def test_fails(redis_server, redis_client):
                redis_client.set("k", "v")
                with open({str(record)!r}, "w") as f:
                    f.write(f"{{redis_server.port}} {{redis_server.data_dir}}")
                assert False, "this inner test fails on purpose"
            """
        )
    )
    # When: the inner session runs in its own process
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", f"pythonpath={ROOT}")
    # Then: it failed, and its redis-server is gone with its data dir
    result.assert_outcomes(failed=1)
    port_text, data_dir = record.read_text().split(" ", 1)
    assert not _listening(int(port_text))
    assert not Path(data_dir).exists()


def test_the_bootstrapped_server_speaks_waitaof_where_debians_does_not() -> None:
    # Given: the server scripts/bootstrap installs for `ingress.durability = "replicated"`
    binary = redis_server_binary(WAITAOF_VERSION)
    assert server_version(binary) >= WAITAOF_VERSION
    with RedisServer(binary=binary) as server:
        client = redis.Redis(port=server.port, socket_timeout=5)
        try:
            client.set("k", "v")
            # Then: WAITAOF confirms the write is in the local AOF (no replica asked for)
            assert client.execute_command("WAITAOF", 1, 0, 1000) == [1, 0]
        finally:
            client.close()
    # The plain default stays the system's redis-server (the embedded single node keeps Debian's 7.0).
    assert redis_server_binary() == shutil.which("redis-server")
