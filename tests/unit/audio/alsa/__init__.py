"""Unit tests of audio/alsa."""
