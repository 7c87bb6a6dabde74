"""Unit tests of listen/features."""
