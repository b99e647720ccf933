"""The Redis layer: everything the bridge's Redis adapters share, and nothing about what they store.

``bridge.outbox`` (the durable outbox), ``bridge.state`` (roles, health, shard leases, retry times, cost),
``bridge.journal`` and later stores sit side by side on top of this package and never import each other
(``tests/unit/test_layering.py``). What is where:

=====================  ====================================================================================
module                 holds
=====================  ====================================================================================
``connection``         ``parse_redis_url``, ``sync_client(url)``, ``async_client(url)``, ``is_cluster``;
                       the hiredis command packing of both clients
``types``              ``SyncRedis``, ``AsyncRedis``: the client types adapters accept (typed, not ``Any``)
``errors``             ``driver_errors()`` and ``translate``: redis-py errors become
                       ``StateStoreUnavailableError`` (or the outbox's ``OutboxUnavailableError``) /
                       ``BackpressureError``, without URL or password
``scripts``            ``LuaScript`` and ``run_script`` / ``run_script_async``: the one ``NOSCRIPT``
                       strategy (load, send again once) for blocking and asyncio clients
``keys``               ``tag(name)``: the ``bridge:{<name>}:`` hash-tag prefix that keeps one entity's keys
                       in one cluster slot
``lease``              ``Lease``: an owner-checked, expiring lease on one key (``Lease.named`` for
                       ``bridge:{lease:<name>}``), used by the Redis door, the drainers, syphons, beat
``fence``              ``Fence``: a lease key and its holder's token, checked by fenced scripts
``pipelined``          ``PipelinedRead`` / ``ReadBatch``: reads of many stores on one pipeline, each parsed by
                       the store that queued it (the status snapshot's one round trip)
=====================  ====================================================================================
"""
