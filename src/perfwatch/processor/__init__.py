"""The stream processor: the processing loop, its ports, the outbox relay and the handlers."""
