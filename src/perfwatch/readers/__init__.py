"""Readers of files: benchmark tool reports, CSV series, JSONL records, input profiles."""
