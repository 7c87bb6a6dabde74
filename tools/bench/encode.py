"""Suite `encode`: what the streaming encoders of the speaking routes cost per chunk.

Each compressed format (PyAV: libmp3lame, libopus in Ogg, FFmpeg's AAC in ADTS, FLAC) is
fed synthesized-speech-like audio (a voiced tone with harmonics and noise, 24 kHz) in
1 s chunks after a 0.25 s first chunk, as the daemon feeds it. Reported: ms of encoding
per second of audio (best of 3 runs; the machine is shared), bytes out with the first
chunk, and the size of a second of output. The target: a chunk's encode stays well
under the 1 s of audio it encodes (it runs on a worker thread, off the event loop).
"""

from __future__ import annotations

import time

import numpy as np

from tools.bench.report import Report

RATE = 24000


def _speechy(seconds: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * RATE)) / RATE
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    x = sum(np.sin(k * phase) / k for k in range(1, 12)) * 0.1
    return (x + rng.standard_normal(t.size) * 0.01).astype(np.float32)


def run(quick: bool) -> Report:
    from cosyvoiced.audio.container import ENCODINGS, StreamEncoder

    seconds = 5 if quick else 30
    audio = _speechy(seconds + 0.25)
    rep = Report("encode", ["format", "ms_per_audio_s", "first_chunk_bytes", "bytes_per_s"])
    worst = 0.0
    for fmt in ENCODINGS:
        best, first, total = float("inf"), 0, 0
        for _ in range(3):
            enc = StreamEncoder(fmt, RATE)
            first = len(enc.encode(audio[:6000]))
            total = first
            t0 = time.perf_counter()
            for i in range(6000, audio.size, RATE):
                total += len(enc.encode(audio[i:i + RATE]))
            spent = time.perf_counter() - t0
            total += len(enc.finish())
            best = min(best, spent / seconds)
        rep.rows.append([fmt, best * 1000, first, total / (seconds + 0.25)])
        rep.figures[f"{fmt}_ms_per_audio_s"] = best * 1000
        worst = max(worst, best * 1000)
    rep.target("worst encode ms per audio second", worst, "<= 50", worst <= 50)
    return rep
