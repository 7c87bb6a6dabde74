"""Unit tests of tts/voice."""
