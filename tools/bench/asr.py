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


def _ours(items, cfg_vad, cfg_asr):
    from cosyvoiced.audio.ring import Ring
    from cosyvoiced.listen.asr import WhisperAsr
    from cosyvoiced.listen.events import Transcript
    from cosyvoiced.listen.vad import SileroBatch
    from cosyvoiced.workers import messages as m
    from cosyvoiced.workers.worker.listeners import WorkerListening
    from cosyvoiced.workers.worker.vad_tick import VadTicker

    vads: dict[int, SileroBatch] = {}

    def make_vad(rate_hz: int) -> SileroBatch:
        if rate_hz not in vads:
            vads[rate_hz] = SileroBatch(rate_hz, 64)
        return vads[rate_hz]

    sent: list[object] = []
    ticker = VadTicker(make_vad, 0.0)
    setup = SimpleNamespace(vad=cfg_vad, asr=cfg_asr, cache_dir=None)
    wl = WorkerListening(setup, ticker, sent.append, decoder=WhisperAsr(cfg_asr, threads=1))
    assert wl.asr is not None and wl.runner is not None
    timed = wl.asr.decoder = _Timed(wl.decoder)

    def decode() -> None:  # on this thread: the timing is the decode's alone
        while len(wl.asr):
            wl.asr.run()

    hyps = []
    pad_a = np.zeros(4000, dtype=np.float32)
    pad_b = np.zeros(8000, dtype=np.float32)
    t0 = time.perf_counter()
    try:
        for i, p in enumerate(items):
            x = np.concatenate([pad_a, p.samples(), pad_b])
            sid = f"p{i}"
            ring = Ring.create(16000)
            try:
                wl.open(sid, 8000, ring)
                for pos in range(0, x.shape[0], 160):
                    ring.write(x[pos: pos + 160])
                    ticker.tick(0.0)
                    decode()
                wl.close(sid)
                decode()
            finally:
                ring.close()
                ring.unlink()
            hyps.append(" ".join(x.event.text for x in sent if isinstance(x, m.ListenEvent)
                                 and x.stream_id == sid and isinstance(x.event, Transcript)))
            sent.clear()
    finally:
        wl.runner.close()
    return (hyps, time.perf_counter() - t0, timed.seconds, timed.frames / 100,
            wl.decoder.retries)


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
