"""The record contract: models, validation, codec and verdict building."""
