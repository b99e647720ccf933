"""The durable outbox in Redis, built on ``bridge.redis`` (beside ``bridge.state``, which it never imports).

``keys`` (layout), ``scripts`` (the write, ack and move scripts), ``writer`` (groups to script calls and
replies to acks, no I/O), ``store`` (``SyncOutbox`` / ``AsyncOutbox``: one set of steps, two shells),
``batcher`` (coalescing HTTP writes), ``reader`` (the send workers' consumer-group side), ``problems``
(quarantine and dead-letter entries and their listing), ``view`` (the asyncio read side the HTTP API uses:
depth, problem entries, readiness, the start-up durability check), ``redis_door`` (the ingress stream),
``opener`` (the Redis client of the outbox's users: the ingress, the ``Producer``).
"""
