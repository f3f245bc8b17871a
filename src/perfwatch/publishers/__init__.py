"""publishers"""
