"""Processes the bridge can start for you: private Redis servers and local Service Bus namespaces.

Used by ``bridge demo`` (the embedded default) and by the test rig; each process gets its own free port and
data directory and is stopped (and its children reaped) on exit.
"""
