"""The AMQP side of the local Service Bus: proton-driven connections, links, requests and settlement."""
