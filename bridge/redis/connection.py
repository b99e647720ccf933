"""Redis connections of the bridge: one URL names a single server, a Sentinel-managed primary or a Cluster.

Connection strings (``settings.redis_url``)::

    redis://[[user]:password@]host[:port][/db]          one server (rediss:// for TLS, unix:///path.sock)
    redis+sentinel://[[user]:password@]host:port[,host:port...]/service_name[/db]
                                                        the primary Sentinel elects for ``service_name``;
                                                        the password is the data nodes' (rediss+sentinel://)
    redis+cluster://[[user]:password@]host:port[,host:port...]
                                                        a Redis Cluster; any reachable nodes to start from

Options: clients use binary replies (``decode_responses=False``) and short timeouts, and redis-py's own
retries are off: a failed outbox write must surface at once as ``OutboxUnavailableError`` (HTTP 503), and the
producer decides whether to retry, so an acknowledgement is never delayed behind a hidden retry loop.

A URL the driver refuses becomes ``ConfigurationError`` without the URL (redis-py's own message quotes it,
password included); errors of the calls made later are translated by ``bridge.redis.errors``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import unquote, urlsplit

import hiredis
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from bridge.errors import ConfigurationError
from bridge.redis.cluster_parser import tolerate_dead_masters
from bridge.redis.types import AnyRedis, AsyncRedis, SyncRedis

Kind = Literal["single", "sentinel", "cluster"]
_TIMEOUT = 5.0


@dataclass(frozen=True)
class RedisTarget:
    """A parsed ``redis_url``; ``password`` is kept out of the repr."""

    kind: Kind
    url: str = field(repr=False)
    hosts: tuple[tuple[str, int], ...] = ()
    service_name: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl: bool = False


def parse_redis_url(url: str) -> RedisTarget:
    """Recognise the three URL forms above; raise ``ConfigurationError`` (without the URL) when malformed."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ConfigurationError("redis_url has no scheme (expected redis://, redis+sentinel://, ...)")
    if scheme in ("redis", "rediss", "unix"):
        return RedisTarget(kind="single", url=url, ssl=scheme == "rediss")
    base, plus, kind = scheme.partition("+")
    if not plus or base not in ("redis", "rediss") or kind not in ("sentinel", "cluster"):
        raise ConfigurationError(f"redis_url scheme {scheme!r} is not supported")
    parts = urlsplit("redis://" + url[len(scheme) + 3 :])
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    hosts = tuple(_host_port(item) for item in hostlist.split(",") if item)
    if not hosts:
        raise ConfigurationError(f"redis_url ({scheme}) names no host")
    path = [segment for segment in parts.path.split("/") if segment]
    service_name = None
    db = 0
    if kind == "sentinel":
        if not path:
            raise ConfigurationError("redis+sentinel:// URL needs /<service_name>")
        service_name = unquote(path.pop(0))
    if path:
        if kind == "cluster" or len(path) > 1 or not path[0].isdigit():
            raise ConfigurationError(f"redis_url ({scheme}) has an unexpected path")
        db = int(path[0])
    return RedisTarget(
        kind=kind,  # type: ignore[arg-type]
        url=url,
        hosts=hosts,
        service_name=service_name,
        db=db,
        username=username,
        password=password,
        ssl=base == "rediss",
    )


def redis_location(url: str) -> str:
    """Where ``url`` points, for an operator's message: ``host:port``, a socket path, a Sentinel service
    with its Sentinels, or a Cluster's seed nodes; never the user name or the password."""
    try:
        target = parse_redis_url(url)
        if target.kind == "single":
            parts = urlsplit(url)
            if parts.scheme == "unix":
                return f"unix socket {parts.path}"
            hosts: tuple[tuple[str, int], ...] = ((parts.hostname or "localhost", parts.port or 6379),)
        else:
            hosts = target.hosts
    except (ConfigurationError, ValueError):  # ValueError: urlsplit's port out of range
        return "(redis_url cannot be parsed)"
    seeds = ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in hosts)
    if target.kind == "sentinel":
        return f"Sentinel service {target.service_name!r} via {seeds}"
    return f"Cluster nodes {seeds}" if target.kind == "cluster" else seeds


def _host_port(item: str) -> tuple[str, int]:
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = item.rpartition(":") if ":" in item else (item, "", "")
    try:
        port = int(port_text) if port_text else 6379
    except ValueError:
        raise ConfigurationError("redis_url has a host with a non-numeric port") from None
    if not host or not 0 < port < 65536:
        raise ConfigurationError("redis_url has an empty host or an invalid port")
    return host, port


def _options(target: RedisTarget) -> dict[str, Any]:
    return {
        "socket_timeout": _TIMEOUT,
        "socket_connect_timeout": _TIMEOUT,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": False,
    }


def sync_client(url: str) -> SyncRedis:
    """A blocking redis-py client for ``url``: ``Redis``, ``RedisCluster`` or a Sentinel-managed ``Redis``."""
    target = parse_redis_url(url)
    if target.kind == "single" and url.startswith("redis://"):
        try:
            return redis.Redis.from_url(url, command_packer=HiredisPacker(), **_options(target))
        except (ValueError, TypeError) as exc:
            raise _unusable_url(exc) from None
    return cast(SyncRedis, _client(target, redis.Redis, redis.cluster, redis.sentinel))


def async_client(url: str) -> AsyncRedis:
    """The asyncio counterpart of ``sync_client``."""
    target = parse_redis_url(url)
    if target.kind == "single" and url.startswith("redis://"):
        try:
            return redis.asyncio.Redis.from_url(
                url, connection_class=HiredisPackingConnection, **_options(target)
            )
        except (ValueError, TypeError) as exc:
            raise _unusable_url(exc) from None
    client = _client(target, redis.asyncio.Redis, redis.asyncio.cluster, redis.asyncio.sentinel)
    return cast(AsyncRedis, tolerate_dead_masters(client))


def pack_command(args: tuple[Any, ...]) -> bytes:
    """One command in RESP, packed in C by hiredis (same splitting of a multi-word name as redis-py).

    redis-py's own packer first copies every argument through a Python generator to turn ``bytearray`` and
    ``memoryview`` into ``bytes``; the outbox script call carries hundreds of arguments, none of them of
    those types, so that copy is done only when hiredis refuses an argument.
    """
    if isinstance(args[0], str):
        args = (*args[0].encode().split(), *args[1:])
    elif b" " in args[0]:
        args = (*args[0].split(), *args[1:])
    pack: Any = hiredis.pack_command  # its stub types the argument as a 1-tuple
    packed: bytes
    try:
        packed = pack(args)
    except TypeError:
        try:
            packed = pack(tuple(bytes(a) if isinstance(a, bytearray | memoryview) else a for a in args))
        except TypeError as exc:
            raise redis.exceptions.DataError(str(exc)) from None
    return packed


class HiredisPackingConnection(redis.asyncio.Connection):
    """An asyncio connection that packs commands in C (``pack_command``); redis-py's encodes in Python.

    Packing the outbox script call of a busy ingress in Python was a tenth of the server's CPU.
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        """The command in RESP."""
        return [pack_command(args)]


class HiredisPacker:
    """The blocking client's counterpart (redis-py's ``command_packer`` hook; used by ``Producer``)."""

    def pack(self, *args: Any) -> list[bytes]:
        """The command in RESP."""
        return [pack_command(args)]


def _client(target: RedisTarget, single: Any, cluster: Any, sentinel: Any) -> Any:
    # redis-py parses the URL again and its ValueError quotes the URL, password included: keep it out.
    try:
        return _build_client(target, single, cluster, sentinel)
    except (ValueError, TypeError) as exc:
        raise _unusable_url(exc) from None


def _unusable_url(exc: Exception) -> ConfigurationError:
    return ConfigurationError(
        f"redis_url cannot be used ({type(exc).__name__}; check its format and "
        "percent-encode reserved characters in the password)"
    )


def _build_client(target: RedisTarget, single: Any, cluster: Any, sentinel: Any) -> Any:
    # redis-py's sync and asyncio modules mirror each other, so one builder serves both.
    options = _options(target)
    if target.kind == "single":
        return single.from_url(target.url, **options)
    auth: dict[str, Any] = {"username": target.username, "password": target.password, "ssl": target.ssl}
    if target.kind == "cluster":
        # Redirects (MOVED/ASK) are followed whatever ``retry`` says. A connection error re-reads the slot
        # table and tries once more at once (a promoted replica answers then); redis-py's default, three
        # tries with backoff, held every write to a dead master's slots for seconds before the 503.
        options["retry"] = Retry(NoBackoff(), 1)
        nodes = [cluster.ClusterNode(host, port) for host, port in target.hosts]
        return cluster.RedisCluster(startup_nodes=nodes, **auth, **options)
    watcher = sentinel.Sentinel(list(target.hosts), socket_timeout=_TIMEOUT)
    return watcher.master_for(str(target.service_name), db=target.db, **auth, **options)


def is_cluster(client: AnyRedis) -> bool:
    """True for cluster clients (no ``WAIT`` across slots, totals updated outside the entity script)."""
    return isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)


def topology(client: AnyRedis) -> Kind:
    """``single``, ``sentinel`` (a client of the primary a Sentinel names) or ``cluster``."""
    if is_cluster(client):
        return "cluster"
    pool = getattr(client, "connection_pool", None)
    sentinel_pools = (redis.sentinel.SentinelConnectionPool, redis.asyncio.sentinel.SentinelConnectionPool)
    return "sentinel" if isinstance(pool, sentinel_pools) else "single"
