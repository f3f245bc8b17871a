"""The record contract: models, validation, codec, RFC 3339 timestamps and verdict building."""
