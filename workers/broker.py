"""Celery's broker from the bridge's settings: a Redis URL Celery (kombu) understands, and its options.

``celery_broker_url`` when set, else ``redis_url``; either may be any form ``bridge.redis.connection``
accepts. A single server passes as it is. A Sentinel-managed primary (``redis+sentinel://``) becomes
kombu's Sentinel transport: one ``sentinel://`` URL per Sentinel joined by ``;``, and the transport option
``master_name``, so the broker follows the primary through a failover as the bridge's own clients do
(kombu would read ``redis+sentinel://`` as the plain Redis transport and, finding no host it knows, connect
to ``localhost:6379``). A Redis Cluster cannot be a Celery broker: with no ``celery_broker_url`` the
settings are refused rather than left to a default Redis nobody named.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from bridge.errors import ConfigurationError
from bridge.redis.connection import parse_redis_url
from bridge.settings import Settings


def celery_broker(settings: Settings) -> tuple[str, dict[str, Any]]:
    """The broker URL for ``Celery(broker=...)`` and its ``broker_transport_options``."""
    given = settings.celery_broker_url
    url = (given or settings.redis_url).get_secret_value()
    # The scheme alone says Cluster: the refusal comes before the URL is parsed, so it is the error a
    # Cluster URL gets whatever else is wrong with it
    if url.partition("://")[0].lower().endswith("+cluster"):
        which = "celery_broker_url" if given else "redis_url"
        raise ConfigurationError(
            f"{which} names a Redis Cluster, which cannot be Celery's broker: set celery_broker_url to a"
            " single Redis or a redis+sentinel:// URL"
        )
    target = parse_redis_url(url)
    if target.kind == "single":
        return url, {}
    auth = ""
    if target.password is not None:
        auth = f"{quote(target.username or '', safe='')}:{quote(target.password, safe='')}@"
    scheme = "sentinel"
    hosts = ";".join(f"{scheme}://{auth}{_host(host)}:{port}/{target.db}" for host, port in target.hosts)
    options: dict[str, Any] = {"master_name": target.service_name}
    if target.ssl:
        options["sentinel_kwargs"] = {"ssl": True}
    return hosts, options


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
