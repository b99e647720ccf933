"""The durable outbox in Redis: key layout, atomic writer, consumer-group reader and the Redis door."""
