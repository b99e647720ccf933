"""The broker model of the local Service Bus: entities, messages, sessions and their persistence; no I/O."""
