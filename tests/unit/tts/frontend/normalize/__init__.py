"""Unit tests of tts/frontend/normalize."""
