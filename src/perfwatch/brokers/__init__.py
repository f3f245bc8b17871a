"""Broker process management for development and tests (embedded broker, Pulsar standalone)."""
