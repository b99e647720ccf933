"""Operations: Prometheus metrics, Sentry, log set-up and the state snapshot behind the status page."""
