"""The processor's ports implemented over real brokers."""
