"""The local Service Bus: an AMQP 1.0 + HTTPS namespace the real azure-servicebus SDK talks to."""
