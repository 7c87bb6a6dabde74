"""Unit tests of runtime."""
