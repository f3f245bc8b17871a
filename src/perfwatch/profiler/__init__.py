"""profiler"""
