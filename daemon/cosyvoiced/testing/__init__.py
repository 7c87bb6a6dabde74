"""Peers and readers that behave like the outside world, for tests and tools only (the daemon never imports them)."""
