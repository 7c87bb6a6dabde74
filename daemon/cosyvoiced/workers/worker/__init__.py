"""Inside a worker process: entry, the loop, TTS and ASR scheduling, the VAD tick, listen streams."""
