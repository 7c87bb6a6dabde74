"""Inside a worker process: entry, pinning (affinity), the loop, TTS and ASR scheduling,
the VAD tick, listen streams, heap trimming."""
