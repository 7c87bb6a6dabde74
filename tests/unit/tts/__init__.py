"""Unit tests of tts."""
