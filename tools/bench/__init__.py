"""Benchmark suites for `python -m tools.bench`, one module per suite."""
