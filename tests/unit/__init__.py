"""Unit tests, one folder per package of the daemon."""
