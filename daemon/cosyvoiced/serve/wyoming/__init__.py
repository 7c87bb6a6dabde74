"""Wyoming protocol server (voice-assistant clients): TTS, ASR and VAD events."""
