"""Suite `words`: our STT word timestamps vs faster-whisper's on the Asterisk prompts.

Every prompt with at least three words (`--quick`: every 10th of them), 0.5 s of silence
before and 1.0 s after, at its own 8 kHz. Ours: the path a worker runs, as the `asr`
suite runs it (`WorkerListening`: capture ring -> batched Silero VAD tick -> `ListenTap`
endpointer and log-mel -> `AsrQueue` -> Whisper tiny.en in CTranslate2, in process, one
thread), once on a stream opened without word times and once with them; the words'
times are stream-relative, so they are times in the padded clip. Reference:
faster-whisper's `WhisperModel` on the same model directory (the bundled CT2 tiny.en)
and the same padded clip at 16 kHz (soxr), `word_timestamps=True`, its VAD off, the
same beam, one CPU thread. Words are paired by their text (Whisper's English
normalizer, then difflib's longest matching runs), so a word one side heard and the
other did not is left out, and |Δstart| is taken over the pairs; it is also given
without each clip's first word, which faster-whisper starts at its segment's start (0.00,
in the leading silence: listen/words.py), and that first word is checked against the
clip's energy onset (the first 10 ms frame within 35 dB of the loudest). Cost: decoding
seconds (the ASR process's share of the work) with word times over without, on the same
utterances.
"""

from __future__ import annotations

import difflib
import time
from pathlib import Path
from typing import Any

import numpy as np
import soxr

from cosyvoiced.testing.prompts import Prompt, normalizer, prompts
from tools.bench.asr import Listening
from tools.bench.report import Report, cpu_flags

PAD_BEFORE_S = 0.5
PAD_AFTER_S = 1.0
RATE_HZ = 8000


def clip(p: Prompt) -> np.ndarray:
    """The prompt between its silences, float32 at 8 kHz."""
    return np.concatenate([np.zeros(int(PAD_BEFORE_S * RATE_HZ), np.float32), p.samples(),
                           np.zeros(int(PAD_AFTER_S * RATE_HZ), np.float32)])


def ours(items: list[Prompt], words: bool) -> tuple[list[list[Any]], float, float]:
    """Each clip's timed words (empty lists when `words` is off) through the worker's
    listening path, the decoding seconds and the seconds of utterance decoded."""
    from cosyvoiced.config.schema import AsrConfig, VadConfig

    path = Listening(VadConfig(), AsrConfig())
    out = []
    try:
        for i, p in enumerate(items):
            finals = path.transcripts(f"p{i}", clip(p), RATE_HZ, words=words)
            out.append([w for t in finals for w in t.words or ()])
    finally:
        path.close()
    return out, path.timed.seconds, path.timed.frames / 100


def reference(items: list[Prompt], beam_size: int, model_dir: Path) -> list[list[Any]]:
    """faster-whisper's word timestamps on each padded clip."""
    from faster_whisper import WhisperModel

    model = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=1,
                         num_workers=1)
    out = []
    for p in items:
        audio = soxr.resample(clip(p), RATE_HZ, 16000).astype(np.float32)
        segments, _ = model.transcribe(audio, beam_size=beam_size, vad_filter=False,
                                       word_timestamps=True, language="en")
        out.append([w for s in segments for w in s.words or ()])
    return out


def onset_s(x: np.ndarray) -> float:
    """Where the clip's sound begins: the first 10 ms frame within 35 dB of its loudest."""
    hop = RATE_HZ // 100
    frames = x[: x.shape[0] // hop * hop].reshape(-1, hop)
    db = 20 * np.log10(np.sqrt((frames ** 2).mean(axis=1)) + 1e-9)
    return float(np.argmax(db > db.max() - 35.0)) / 100


def paired_deltas(mine: list[Any], theirs: list[Any]) -> list[tuple[int, float]]:
    """(our word's index, signed start difference ours - faster-whisper's in s) of the
    words both heard."""
    norm = normalizer()
    a = [norm(w.word) for w in mine]
    b = [norm(w.word) for w in theirs]
    out = []
    for block in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            i, j = block.a + k, block.b + k
            if a[i]:
                out.append((i, mine[i].start_s - float(theirs[j].start)))
    return out


def run(quick: bool) -> Report:
    import logging

    import structlog

    from cosyvoiced.config.schema import AsrConfig
    from cosyvoiced.listen.asr import bundled_model_dir

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    items = [p for p in prompts() if len(p.text.split()) >= 3]
    if quick:
        items = items[::10]
    audio_s = sum(clip(p).shape[0] for p in items) / RATE_HZ
    rep = Report("words", ["run", "clips", "words", "decode_s", "utterance_s", "rtf"])
    t0 = time.perf_counter()
    _, plain_s, plain_utt_s = ours(items, words=False)
    timed_words, words_s, words_utt_s = ours(items, words=True)
    # again without: the first run paid for warming up
    _, plain2_s, _ = ours(items, words=False)
    plain_s = min(plain_s, plain2_s)
    ours_wall = time.perf_counter() - t0
    theirs = reference(items, AsrConfig().beam_size, bundled_model_dir())
    pairs = [pd for m, t in zip(timed_words, theirs, strict=True)
             for pd in paired_deltas(m, t)]
    deltas = np.array([d for _, d in pairs])
    later = np.abs(np.array([d for i, d in pairs if i > 0]))
    first_vs_onset = np.array([m[0].start_s - onset_s(clip(p))
                               for p, m in zip(items, timed_words, strict=True) if m])
    n_words = sum(len(w) for w in timed_words)
    rep.rows.append(["ours, without word times", len(items), 0, plain_s, plain_utt_s,
                     plain_s / max(plain_utt_s, 1e-9)])
    rep.rows.append(["ours, with word times", len(items), n_words, words_s, words_utt_s,
                     words_s / max(words_utt_s, 1e-9)])
    absd = np.abs(deltas) if deltas.size else np.array([np.inf])
    median_ms = float(np.median(absd) * 1000)
    p90_ms = float(np.percentile(absd, 90) * 1000)
    ratio = words_s / max(plain_s, 1e-9)
    rep.figures.update(
        cpu=cpu_flags(), clips=len(items), audio_s=round(audio_s, 1),
        words_ours=n_words, words_faster_whisper=sum(len(t) for t in theirs),
        words_paired=int(deltas.size), abs_dstart_median_ms=round(median_ms, 1),
        abs_dstart_p90_ms=round(p90_ms, 1),
        dstart_mean_ms=round(float(np.mean(deltas) * 1000), 1) if deltas.size else None,
        within_20ms_pct=round(float(np.mean(absd <= 0.02) * 100), 1),
        abs_dstart_median_ms_not_first=round(float(np.median(later) * 1000), 1),
        abs_dstart_p90_ms_not_first=round(float(np.percentile(later, 90) * 1000), 1),
        first_word_minus_onset_median_abs_ms=round(
            float(np.median(np.abs(first_vs_onset)) * 1000), 1),
        first_word_minus_onset_p90_abs_ms=round(
            float(np.percentile(np.abs(first_vs_onset), 90) * 1000), 1),
        decode_s_plain=round(plain_s, 2), decode_s_words=round(words_s, 2),
        rtf_ratio_words_over_plain=round(ratio, 3), ours_wall_s=round(ours_wall, 1))
    rep.notes.append(f"CPU: {rep.figures['cpu']}")
    rep.notes.append(f"{deltas.size} words paired of {n_words} ours / "
                     f"{rep.figures['words_faster_whisper']} faster-whisper's: |Δstart| median "
                     f"{median_ms:.0f} ms, p90 {p90_ms:.0f} ms, mean signed "
                     f"{rep.figures['dstart_mean_ms']} ms; without each clip's first word "
                     f"median {rep.figures['abs_dstart_median_ms_not_first']} ms, p90 "
                     f"{rep.figures['abs_dstart_p90_ms_not_first']} ms; first word vs the "
                     f"energy onset: median "
                     f"{rep.figures['first_word_minus_onset_median_abs_ms']} ms, p90 "
                     f"{rep.figures['first_word_minus_onset_p90_abs_ms']} ms")
    rep.target("stt_word_abs_dstart_median_ms", median_ms, "<= 40", median_ms <= 40)
    rep.target("stt_rtf_with_words_over_without", ratio, "<= 1.3", ratio <= 1.3)
    return rep
