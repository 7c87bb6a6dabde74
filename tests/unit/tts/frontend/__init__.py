"""Unit tests of tts/frontend."""
