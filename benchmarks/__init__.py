"""Benchmarks of the quota engine against a real Redis (run as scripts, see each module's docstring)."""
