"""Shared replication state in Redis: roles and health, paired failover, cost counters, retry and leases.

Each store applies what a pure ``bridge.core`` module decided, atomically, with the same semantics; key
layout in ``bridge.state.keys``. Built on ``bridge.redis`` beside ``bridge.outbox``, never importing it;
``bridge.status`` reads both to assemble the ``bridge status --json`` contract.
"""
