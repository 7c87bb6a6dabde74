"""Asterisk AudioSocket: one TCP connection per call, 3-byte framed messages."""
