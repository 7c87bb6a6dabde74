"""Unit tests of tools."""
