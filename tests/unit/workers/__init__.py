"""Unit tests of workers."""
