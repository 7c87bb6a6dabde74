"""Benchmark suites for tools/bench.py, one module per suite."""
