"""Listen: log-mel features, Silero VAD, Whisper ASR and the events they raise."""
