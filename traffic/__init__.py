"""Traffic sources for the demo and the benchmarks: clients that drive the quota engine (no Django)."""
