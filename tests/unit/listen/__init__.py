"""Unit tests of listen."""
