"""Unit tests of tts/normalize."""
