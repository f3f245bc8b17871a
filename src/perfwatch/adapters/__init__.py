"""Adapters to the outside world: Pulsar ports, record publishing, verdict consumers."""
