"""Listen: log-mel features, Silero VAD, Whisper ASR and the events they raise.

The building blocks only; a worker wires them into the listening path that ships
(`cosyvoiced.workers.worker`: `vad_tick`, `utterances`, `asr_sched`, `listeners`)."""
