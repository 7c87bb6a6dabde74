"""Suite `asr`: our listening pipeline vs plain faster-whisper on the Asterisk prompts.

Every prompt with a real transcript (bracketed tone/beep entries skipped; `--quick`: every
10th). Ours: the prompt at its own 8 kHz, between 0.5 s and 1.0 s of silence, fed in
20 ms frames through `ListenBatch` (Silero VAD + endpointer + our log-mel + Whisper
tiny.en in CTranslate2, beam from `AsrConfig`); the transcripts of all its utterances are
joined. Reference: faster-whisper's `WhisperModel` on the same model directory and the
same 16 kHz audio (soxr), its VAD off, `without_timestamps=True`, the same beam, one CPU
thread, everything else at its defaults. Both texts go through Whisper's English
normalizer (package whisper-normalizer, no torch) before the WER.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import soxr

from tools.bench.prompts import prompts, wer
from tools.bench.report import Report


def _ours(items, cfg_vad, cfg_asr):
    from cosyvoiced.listen.legacy import ListenBatch

    batch = ListenBatch(cfg_vad, cfg_asr)
    hyps, asr_s, speech_s = [], 0.0, 0.0
    pad_a = np.zeros(4000, dtype=np.float32)
    pad_b = np.zeros(8000, dtype=np.float32)
    t0 = time.perf_counter()
    for i, p in enumerate(items):
        x = np.concatenate([pad_a, p.samples(), pad_b])
        sid = f"p{i}"
        stream = batch.open(sid, 8000)
        texts = []
        for pos in range(0, x.shape[0], 160):
            stream.feed(x[pos: pos + 160])
            batch.vad_tick()
            if stream.utterances:
                speech_s += sum(u.frames.shape[0] for u in stream.utterances) / 100
                t = time.perf_counter()
                texts += [e.text for e in batch.transcribe_pending([stream])]
                asr_s += time.perf_counter() - t
        for e in batch.close(sid, transcribe=False):
            del e
        if stream.utterances:
            speech_s += sum(u.frames.shape[0] for u in stream.utterances) / 100
            t = time.perf_counter()
            texts += [e.text for e in batch.transcribe_pending([stream])]
            asr_s += time.perf_counter() - t
        hyps.append(" ".join(texts))
    return hyps, time.perf_counter() - t0, asr_s, speech_s, batch._asr.retries


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
