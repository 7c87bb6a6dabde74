"""Speak: Piper voices on our ONNX session factory, clause-streamed."""
