"""Paired-namespace mode's periodic work: pinging failed-over entities and syphoning backlog queues."""
