"""Developer tooling: local services for the quick start, the tests and the benchmarks."""
