"""Speak: text through the front end (`frontend/`), the voice as an engine (`voice/`) and streaming synthesis (`streaming/`), tied together by `engine.TtsEngine`."""
