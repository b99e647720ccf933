"""The HTTP side of the local Service Bus: the HTTPS management endpoint and the plain-HTTP fault control."""
