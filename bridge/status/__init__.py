"""The status read model, above the stores it reads: what ``bridge status``, the status page and the
Prometheus scrape show.

``collect`` assembles the ``bridge status --json`` contract from the outbox, the replication state and the
journal; ``snapshot`` adds what a scrape needs (oldest outbox age, backlog depths, receiver counters);
``collector`` turns a snapshot into metric families at scrape time; ``exposition`` serves a process's
metrics (multiprocess for the prefork worker) with those families; ``process`` starts a process's
observability (logs, Sentry, tracing, metrics endpoint). The instruments every layer records into —
metrics, spans, transitions, Sentry, logs — stay below the stores, in ``bridge.observability``.
"""
