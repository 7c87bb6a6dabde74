"""Unit tests of tts/streaming."""
