"""Synthetic callers made of real speech, and how a run over them is judged.

A caller (`CallPlan`) is a stream of real Asterisk prompts (human telephone speech,
8 kHz) separated by quiet background noise, so that speech fills `speech_fraction` of the
call (~35 %, a typical caller who also listens). Prompts are trimmed of their own
leading/trailing silence, so each prompt's end in the plan is the end of speech a
latency is measured from. Gaps are at least `MIN_GAP_S` (longer than the VAD's 500 ms
`stop_ms`, so prompts stay separate utterances) and the call ends with `TAIL_S` of
silence (its last utterance ends before the stream does).

`judge` matches the transcripts a pipeline produced to the plan's prompts by time
overlap and gives each prompt a latency (transcript arrival minus the wall time its
last sample was due), `inf` when no transcript came. `search` is the ramp: double the
count while runs pass, then bisect between the last pass and the first failure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from cosyvoiced.testing.prompts import Prompt, wer

MIN_GAP_S = 1.0
TAIL_S = 1.5
MIN_PROMPT_S = 0.4
MAX_PROMPT_S = 8.0
NOISE_RMS = 0.001
"""Background between prompts: white noise at -60 dBFS."""
TRIM_DB = 35.0
"""A 10 ms frame quieter than the prompt's loudest by this much is silence."""
MIN_PEAK_RMS = 0.01
"""A prompt whose loudest 10 ms frame is quieter (-40 dBFS) is not speech (the corpus
has "(N seconds of silence)" files)."""


@dataclass(frozen=True)
class Clip:
    """A prompt trimmed to its speech."""

    text: str
    audio: np.ndarray


@dataclass(frozen=True)
class Span:
    start_s: float
    end_s: float
    text: str


@dataclass
class CallPlan:
    audio: np.ndarray
    rate_hz: int
    spans: list[Span]

    @property
    def seconds(self) -> float:
        return self.audio.shape[0] / self.rate_hz

    @property
    def speech_s(self) -> float:
        return sum(s.end_s - s.start_s for s in self.spans)


@dataclass(frozen=True)
class Heard:
    """One transcript as the bench received it."""

    start_ms: int
    end_ms: int
    text: str
    arrival_s: float
    """`time.monotonic()` when it reached the bench."""


@dataclass
class Verdict:
    latencies_s: list[float] = field(default_factory=list)
    """One per prompt, in plan order (inf: no transcript)."""
    refs: list[str] = field(default_factory=list)
    hyps: list[str] = field(default_factory=list)
    spurious: int = 0
    """Transcripts overlapping no prompt."""

    @property
    def missed(self) -> int:
        return sum(1 for x in self.latencies_s if math.isinf(x))

    def merge(self, other: Verdict) -> None:
        self.latencies_s += other.latencies_s
        self.refs += other.refs
        self.hyps += other.hyps
        self.spurious += other.spurious


def trim(audio: np.ndarray, rate_hz: int, db: float = TRIM_DB) -> np.ndarray:
    """`audio` without its leading/trailing frames `db` below its loudest 10 ms frame."""
    hop = rate_hz // 100
    n = audio.shape[0] // hop
    if n == 0:
        return audio[:0]
    rms = np.sqrt(np.mean(audio[: n * hop].reshape(n, hop) ** 2, axis=1) + 1e-12)
    loud = np.flatnonzero(rms >= rms.max() * 10 ** (-db / 20))
    return audio[loud[0] * hop: (loud[-1] + 1) * hop]


def peak_rms(audio: np.ndarray, rate_hz: int) -> float:
    """RMS of the loudest 10 ms frame."""
    hop = rate_hz // 100
    n = audio.shape[0] // hop
    if n == 0:
        return 0.0
    return float(np.sqrt(np.mean(audio[: n * hop].reshape(n, hop) ** 2, axis=1)).max())


def clips(prompts: Sequence[Prompt], rate_hz: int = 8000) -> list[Clip]:
    """Speech prompts trimmed to their speech, those MIN_PROMPT_S to MAX_PROMPT_S long."""
    out = []
    for p in prompts:
        a = trim(p.samples(), rate_hz)
        if (MIN_PROMPT_S * rate_hz <= a.shape[0] <= MAX_PROMPT_S * rate_hz
                and peak_rms(a, rate_hz) >= MIN_PEAK_RMS):
            out.append(Clip(p.text, a))
    return out


def plan_call(corpus: Sequence[Clip], seconds: float, *, seed: int, rate_hz: int = 8000,
              speech_fraction: float = 0.35) -> CallPlan:
    """One caller: prompts (random from `corpus`) and noise, `seconds` long."""
    rng = np.random.default_rng(seed)
    room = seconds - TAIL_S
    picked: list[Clip] = []
    speech = 0.0
    while True:
        c = corpus[int(rng.integers(len(corpus)))]
        s = c.audio.shape[0] / rate_hz
        need = speech + s + MIN_GAP_S * (len(picked) + 1)
        if need > room or (picked and speech + s > speech_fraction * seconds * 1.15):
            break
        picked.append(c)
        speech += s
        if speech >= speech_fraction * seconds:
            break
    silence = seconds - speech
    # Gaps (lead, between prompts, tail): MIN_GAP_S each (TAIL_S last), the rest at random.
    mins = [MIN_GAP_S] * len(picked) + [TAIL_S]
    spare = max(0.0, silence - sum(mins))
    w = rng.random(len(mins))
    w[-1] *= 0.2  # little extra at the end: keep the prompts spread over the call
    gaps = [m + spare * x / w.sum() for m, x in zip(mins, w, strict=True)]
    audio = (rng.standard_normal(int(seconds * rate_hz)) * NOISE_RMS).astype(np.float32)
    spans, pos = [], 0
    for gap, c in zip(gaps, picked, strict=False):
        pos += int(gap * rate_hz)
        audio[pos: pos + c.audio.shape[0]] += c.audio
        spans.append(Span(pos / rate_hz, (pos + c.audio.shape[0]) / rate_hz, c.text))
        pos += c.audio.shape[0]
    np.clip(audio, -1.0, 1.0, out=audio)
    return CallPlan(audio, rate_hz, spans)


def plan_calls(corpus: Sequence[Clip], n: int, seconds: float, *, seed: int = 0,
               rate_hz: int = 8000) -> list[CallPlan]:
    return [plan_call(corpus, seconds, seed=seed * 100003 + i, rate_hz=rate_hz)
            for i in range(n)]


def judge(plan: CallPlan, heard: Sequence[Heard], t0_s: float) -> Verdict:
    """Match transcripts to prompts by overlap; latency from each prompt's end (due at
    `t0_s + end_s` on the wall clock) to the arrival of its last transcript."""
    got: list[list[Heard]] = [[] for _ in plan.spans]
    v = Verdict()
    for h in heard:
        a, b = h.start_ms / 1000, h.end_ms / 1000
        overlaps = [min(b, s.end_s) - max(a, s.start_s) for s in plan.spans]
        best = int(np.argmax(overlaps)) if overlaps else -1
        if best < 0 or overlaps[best] <= 0:
            v.spurious += 1
        else:
            got[best].append(h)
    for span, hs in zip(plan.spans, got, strict=True):
        v.refs.append(span.text)
        if hs:
            v.latencies_s.append(max(h.arrival_s for h in hs) - (t0_s + span.end_s))
            v.hyps.append(" ".join(h.text for h in sorted(hs, key=lambda h: h.start_ms)))
        else:
            v.latencies_s.append(math.inf)
            v.hyps.append("")
    return v


def pctl(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (inf values allowed; nan for no values)."""
    if not values:
        return math.nan
    xs = sorted(values)
    return xs[max(0, math.ceil(q / 100 * len(xs)) - 1)]


def summary(v: Verdict) -> dict[str, float | int | None]:
    def num(x: float) -> float | None:
        return None if math.isinf(x) or math.isnan(x) else round(x, 3)

    return {"utterances": len(v.latencies_s), "missed": v.missed, "spurious": v.spurious,
            "latency_p50_s": num(pctl(v.latencies_s, 50)),
            "latency_p95_s": num(pctl(v.latencies_s, 95)),
            "latency_max_s": num(pctl(v.latencies_s, 100)),
            "wer_pct": round(wer(v.refs, v.hyps), 2) if v.refs else None}


class CallRamp:
    """The ramp as a stepper, so two pipelines' ramps can take turns (both then see the
    same shifts of a shared machine's load): `next()` gives the count to try (None: done),
    `report(ok)` its outcome. Doubles from `start` while trials pass, then bisects between
    the best pass and the lowest failure until they are within `resolution` (relative)
    or `max_trials` ran."""

    def __init__(self, start: int, max_trials: int, resolution: float = 0.1) -> None:
        self.n: int | None = max(1, start)
        self.max_trials = max_trials
        self.resolution = resolution
        self.best = 0
        self.fail: int | None = None
        self.tried: dict[int, bool] = {}

    def next(self) -> int | None:
        return self.n if len(self.tried) < self.max_trials else None

    def report(self, ok: bool) -> None:
        n = self.n
        assert n is not None
        self.tried[n] = ok
        if ok:
            self.best = max(self.best, n)
        else:
            self.fail = n if self.fail is None else min(self.fail, n)
        best, fail = self.best, self.fail
        if fail is None:
            nxt: int | None = n * 2
        elif fail - best <= max(1, int(self.resolution * best)):
            nxt = None
        else:
            nxt = (best + fail) // 2 if best else fail // 2
        self.n = None if nxt is None or nxt < 1 or nxt in self.tried else nxt


def search(trial: Callable[[int], bool], start: int, max_trials: int,
           resolution: float = 0.1) -> tuple[int, int | None]:
    """Run a `CallRamp` to its end; returns (best passing count or 0, lowest failing count)."""
    ramp = CallRamp(start, max_trials, resolution)
    while (n := ramp.next()) is not None:
        ramp.report(trial(n))
    return ramp.best, ramp.fail
