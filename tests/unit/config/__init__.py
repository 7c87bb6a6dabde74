"""Unit tests of config."""
