"""Profiling in separate passes: a context manager and decorator (core), the counting tracer (counting) and the pytest plugin (pytest_plugin)."""
