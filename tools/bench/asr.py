"""Suite `asr`: our listening pipeline vs plain faster-whisper on the Asterisk prompts.

Every prompt with a real transcript (bracketed tone/beep entries skipped; `--quick`: every
10th). Ours: the path a worker runs (`WorkerListening`: capture ring -> batched Silero VAD
tick -> `ListenTap` endpointer and log-mel -> `AsrQueue` -> Whisper tiny.en in
CTranslate2, beam from `AsrConfig`, early decodes included), in process (the daemon
decodes in the box's ASR process, on the same `WhisperAsr`, one thread here): the prompt at its
own 8 kHz, between 0.5 s and 1.0 s of silence, written to the ring in 20 ms frames with a
VAD tick after each, batches decoded on this thread as soon as they are queued; the
transcripts of all its utterances are joined. Reference: faster-whisper's `WhisperModel`
on the same model directory and the same 16 kHz audio (soxr), its VAD off,
`without_timestamps=True`, the same beam, one CPU thread, everything else at its
defaults. Both texts go through Whisper's English normalizer (package whisper-normalizer,
no torch) before the WER.
"""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import soxr

from cosyvoiced.testing.prompts import prompts, wer
from tools.bench.report import Report


class _Timed:
    """The decoder, timed: decoding seconds and utterance frames (10 ms each) decoded."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.frames = 0

    def transcribe(self, utts):
        t = time.perf_counter()
        out = self.inner.transcribe(utts)
        self.seconds += time.perf_counter() - t
        self.frames += sum(u.frames.shape[0] for u in utts)
        return out


class Listening:
    """The path a worker's listening runs (`WorkerListening`: capture ring -> batched
    Silero VAD tick -> endpointer and log-mel -> `AsrQueue` -> Whisper), in process, its
    decoder timed (`timed`) and run on this thread as soon as a batch is queued."""

    def __init__(self, cfg_vad, cfg_asr) -> None:
        from cosyvoiced.listen.asr import WhisperAsr
        from cosyvoiced.listen.vad import SileroBatch
        from cosyvoiced.workers.worker.listeners import WorkerListening
        from cosyvoiced.workers.worker.vad_tick import VadTicker

        vads: dict[int, SileroBatch] = {}

        def make_vad(rate_hz: int) -> SileroBatch:
            if rate_hz not in vads:
                vads[rate_hz] = SileroBatch(rate_hz, 64)
            return vads[rate_hz]

        self.sent: list[object] = []
        self.ticker = VadTicker(make_vad, 0.0)
        setup = SimpleNamespace(vad=cfg_vad, asr=cfg_asr, cache_dir=None)
        self.wl = WorkerListening(setup, self.ticker, self.sent.append,
                                  decoder=WhisperAsr(cfg_asr, threads=1))
        assert self.wl.asr is not None and self.wl.runner is not None
        self.timed = self.wl.asr.decoder = _Timed(self.wl.decoder)

    def _decode(self) -> None:  # on this thread: the timing is the decode's alone
        while len(self.wl.asr):
            self.wl.asr.run()

    def transcripts(self, sid: str, x: np.ndarray, rate_hz: int, **open_kw) -> list:
        """The `Transcript`s of `x` (float32 at `rate_hz`), written to the ring in 20 ms
        frames with a VAD tick after each."""
        from cosyvoiced.audio.ring import Ring
        from cosyvoiced.listen.events import Transcript
        from cosyvoiced.workers import messages as m

        ring = Ring.create(16000)
        try:
            self.wl.open(sid, rate_hz, ring, **open_kw)
            frame = rate_hz // 50
            for pos in range(0, x.shape[0], frame):
                ring.write(x[pos: pos + frame])
                self.ticker.tick(0.0)
                self._decode()
            self.wl.close(sid)
            self._decode()
        finally:
            ring.close()
            ring.unlink()
        out = [e.event for e in self.sent if isinstance(e, m.ListenEvent)
               and e.stream_id == sid and isinstance(e.event, Transcript)]
        self.sent.clear()
        return out

    def close(self) -> None:
        self.wl.runner.close()


def _ours(items, cfg_vad, cfg_asr):
    path = Listening(cfg_vad, cfg_asr)
    hyps = []
    pad_a = np.zeros(4000, dtype=np.float32)
    pad_b = np.zeros(8000, dtype=np.float32)
    t0 = time.perf_counter()
    try:
        for i, p in enumerate(items):
            x = np.concatenate([pad_a, p.samples(), pad_b])
            hyps.append(" ".join(t.text for t in path.transcripts(f"p{i}", x, 8000)))
    finally:
        path.close()
    return (hyps, time.perf_counter() - t0, path.timed.seconds, path.timed.frames / 100,
            path.wl.decoder.retries)


def _faster_whisper(items, beam_size, model_dir):
    from faster_whisper import WhisperModel

    model = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=1,
                         num_workers=1)
    hyps = []
    t0 = time.perf_counter()
    for p in items:
        audio = soxr.resample(p.samples(), 8000, 16000).astype(np.float32)
        segments, _ = model.transcribe(audio, beam_size=beam_size, vad_filter=False,
                                       without_timestamps=True)
        hyps.append(" ".join(s.text.strip() for s in segments))
    return hyps, time.perf_counter() - t0


def run(quick: bool) -> Report:
    import logging

    import structlog

    from cosyvoiced.listen.asr import bundled_model_dir

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    from cosyvoiced.config.schema import AsrConfig, VadConfig

    items = prompts()
    if quick:
        items = items[::10]
    refs = [p.text for p in items]
    audio_s = sum(p.samples().shape[0] for p in items) / 8000
    cfg_asr = AsrConfig()
    rep = Report("asr", ["pipeline", "prompts", "wer_pct", "wall_s", "audio_s", "rtf"])

    hyps, wall, asr_s, speech_s, retries = _ours(items, VadConfig(), cfg_asr)
    ours_wer = wer(refs, hyps)
    rep.rows.append([f"ours (VAD + mel + CT2, enc>={cfg_asr.min_encoder_frames}, "
                     f"beam {cfg_asr.beam_size})", len(items), ours_wer, wall, audio_s,
                     wall / audio_s])
    rep.figures["ours_retries_on_full_window"] = retries
    for frames in (1000, 3000):  # what the encoder window length does to WER and speed
        alt = replace(cfg_asr, min_encoder_frames=frames)
        h, w, a, sp, r = _ours(items, VadConfig(), alt)
        rep.rows.append([f"ours, enc>={frames}", len(items), wer(refs, h), w, audio_s,
                         w / audio_s])
        rep.figures[f"enc{frames}_asr_cpu_s_per_speech_s"] = a / max(sp, 1e-9)
        rep.figures[f"enc{frames}_retries"] = r
    fw_hyps, fw_wall = _faster_whisper(items, cfg_asr.beam_size, bundled_model_dir())
    fw_wer = wer(refs, fw_hyps)
    rep.rows.append([f"faster-whisper (no VAD, beam {cfg_asr.beam_size})", len(items), fw_wer,
                     fw_wall, audio_s, fw_wall / audio_s])
    rep.figures.update(
        ours_wer_pct=ours_wer, faster_whisper_wer_pct=fw_wer,
        ours_asr_s=asr_s, ours_speech_s=speech_s,
        ours_asr_cpu_s_per_speech_s=asr_s / max(speech_s, 1e-9),
        faster_whisper_s_per_audio_s=fw_wall / audio_s,
        differing=[(r, h, f) for r, h, f in zip(refs, hyps, fw_hyps, strict=True)
                   if h.strip().lower() != f.strip().lower()][:40])
    rep.notes.append(f"ASR cost: {asr_s:.1f} s decoding for {speech_s:.1f} s of utterance "
                     f"(incl. preroll/tail) = {asr_s / max(speech_s, 1e-9):.3f} s per s of speech")
    rep.target("wer_ours_minus_faster_whisper_pts", ours_wer - fw_wer, "<= 1.0",
               ours_wer <= fw_wer + 1.0)
    return rep
