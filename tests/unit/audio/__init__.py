"""Unit tests of audio."""
