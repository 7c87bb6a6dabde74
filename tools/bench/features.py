"""Suite `features`: streaming log-mel cost vs librosa, allocations, batched VAD cost.

Same run, same machine: our `MelStream` fed one 10 ms hop at a time vs librosa computing
the same frame from the last 25 ms (what a naive streaming caller does), and both on
1 s blocks. numpy array-data allocations are counted (calls, not live bytes) over the
steady state. Also the per-window cost of one batched Silero run at several batch sizes
(the figure the workers' admission model needs).
"""

from __future__ import annotations

import time

import numpy as np

from tools.bench.npalloc import counting
from tools.bench.report import Report


def _per_call(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(3):  # best of 3: the machine is shared
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def _librosa_rel_error(librosa) -> float:  # noqa: ANN001
    """Largest relative difference, over a real prompt, of our streamed mel power to
    `librosa.feature.melspectrogram` itself (the unit tests compare with librosa's
    filterbank and its STFT written out: importing `librosa.feature` compiles numba
    functions for ~30 s on a fresh virtualenv)."""
    from cosyvoiced.listen.features.spec import generic_spec
    from cosyvoiced.listen.features.stream import MelFrames, MelStream
    from cosyvoiced.testing.prompts import prompt_samples

    y = prompt_samples("agent-pass", 16000)
    spec = generic_spec(n_fft=400, hop=160, n_mels=80, log="power")
    ms = MelStream(spec)
    ring = MelFrames(y.shape[0] // spec.hop + 8, spec.n_features)
    ms.push(y, ring)
    ms.flush(ring)
    ours = ring.buf[:ring.count].T
    ref = librosa.feature.melspectrogram(y=y.astype(np.float64), sr=16000, n_fft=400,
                                         hop_length=160, n_mels=80)
    if ours.shape != ref.shape:
        return float("inf")
    return float(np.max(np.abs(ours - ref) / ref))


def run(quick: bool) -> Report:
    import librosa

    from cosyvoiced.listen.features.spec import WHISPER, generic_spec
    from cosyvoiced.listen.features.stream import MelFrames, MelStream
    from cosyvoiced.listen.vad import SileroBatch, window_samples

    rep = Report("features", ["what", "ours_us", "librosa_us", "ratio"])
    rng = np.random.default_rng(0)
    seconds = 10 if quick else 60
    sig = (rng.standard_normal(16000 * seconds) * 0.1).astype(np.float32)
    hop_reps = 300 if quick else 2000

    for label, spec in (("whisper log-mel", WHISPER),
                        ("mfcc13 (40 mel, 512)", generic_spec(n_mfcc=13))):
        ms = MelStream(spec)
        ring = MelFrames(3000, spec.n_features)
        ms.push(sig[:16000], ring)
        hops = [sig[i: i + spec.hop] for i in range(16000, sig.shape[0], spec.hop)]
        it = iter(hops * 10)
        ours_hop = _per_call(lambda it=it, ms=ms, ring=ring: ms.push(next(it), ring), hop_reps)
        window = sig[:spec.n_fft].copy()
        kw = dict(sr=spec.rate_hz, n_fft=spec.n_fft, hop_length=spec.hop, n_mels=spec.n_mels,
                  center=False)
        if spec.n_mfcc:
            def ref_hop(window=window, kw=kw, n=spec.n_mfcc):
                librosa.feature.mfcc(y=window, n_mfcc=n, **kw)
        else:
            def ref_hop(window=window, kw=kw):
                librosa.feature.melspectrogram(y=window, **kw)
        lib_hop = _per_call(ref_hop, max(20, hop_reps // 20))
        rep.rows.append([f"{label}: per hop (stream)", ours_hop * 1e6, lib_hop * 1e6,
                         lib_hop / ours_hop])
        if spec is WHISPER:
            rep.target("streaming_speedup_vs_librosa", lib_hop / ours_hop, ">= 20",
                       lib_hop / ours_hop >= 20)

        block = sig[:16000]
        ring_b = MelFrames(200, spec.n_features)
        ms_b = MelStream(spec)

        def ours_block(ms=ms_b, ring_b=ring_b, block=block):
            ms.reset()
            ms.push(block, ring_b)

        kwb = dict(kw, center=True)
        if spec.n_mfcc:
            def ref_block(kwb=kwb, n=spec.n_mfcc, block=block):
                librosa.feature.mfcc(y=block, n_mfcc=n, **kwb)
        else:
            def ref_block(kwb=kwb, block=block):
                librosa.feature.melspectrogram(y=block, **kwb)
        ob = _per_call(ours_block, 5 if quick else 20)
        lb = _per_call(ref_block, 5 if quick else 20)
        rep.rows.append([f"{label}: per 1 s block", ob * 1e6, lb * 1e6, lb / ob])

        with counting() as c:
            for h in hops:
                ms.push(h, ring)
        per_s = c.calls / (len(hops) * spec.hop / spec.rate_hz)
        rep.figures[f"{label} numpy allocations over {len(hops)} hops"] = c.calls
        if spec is WHISPER:
            rep.target("numpy_allocations_per_s_steady", per_s, "== 0", c.calls == 0)
            rep.figures["whisper_hop_us"] = ours_hop * 1e6
            rep.figures["cpu_share_per_16k_stream_pct"] = ours_hop * 100 * 100

    rel = _librosa_rel_error(librosa)
    rep.figures["mel_power_max_rel_error_vs_librosa"] = rel
    rep.target("mel_power_vs_librosa_max_rel_error", rel, "<= 1e-4", rel <= 1e-4)

    for rate in (16000, 8000):
        w = window_samples(rate)
        for n in (1, 8, 32, 128):
            batch = SileroBatch(rate, n)
            slots = np.array([batch.open() for _ in range(n)])
            x = (rng.standard_normal((n, w)) * 0.05).astype(np.float32)
            per_run = _per_call(lambda b=batch, s=slots, x=x: b.run(s, x),
                                max(5, (400 if quick else 2000) // n))
            rep.rows.append([f"silero {rate // 1000} kHz batch {n}: per window",
                             per_run / n * 1e6, "", ""])
            rep.figures[f"vad_{rate}_batch{n}_us_per_window"] = per_run / n * 1e6
    rep.notes.append("librosa per hop: melspectrogram/mfcc on the last n_fft samples "
                     "(center=False); ours: MelStream.push of one hop")
    rep.notes.append("silero rows: one SileroBatch.run over n streams, divided by n "
                     "(gather + session.run + scatter)")
    return rep
