"""Shared replication state in Redis: roles and health, paired failover, cost counters, retry and leases.

Each store applies what a pure ``bridge.core`` module decided, atomically, with the same semantics; key
layout in ``bridge.state.keys``. ``bridge.state.status`` assembles the ``bridge status --json`` contract.
"""
