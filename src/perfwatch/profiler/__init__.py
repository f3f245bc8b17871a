"""Per-input profiling in separate passes.

`core` has the context manager and decorator, `counting` the statement, loop
and conditional tracer, `pytest_plugin` the pytest plugin, `alternate` the
profiling of two versions of the code in alternating rounds of a pytest process
each.
"""
