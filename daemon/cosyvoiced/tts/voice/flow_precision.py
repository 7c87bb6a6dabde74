"""The flow's engine and precision, chosen per voice at load (`tts.flow`).

The flow (z_p -> the decoder's latent, ~30% of a sentence's synthesis time with the
decoder in bf16) may run in bf16 through OpenVINO's CPU plugin instead of FP32 on ONNX
Runtime: on an AMD EPYC with AVX512-BF16 (no AMX), one thread, the windows of real
sentences took 0.44-0.57x ONNX Runtime's time (docs/performance.md). Its windows have
every length, and the plugin builds kernels for each shape it meets, so one model with
a dynamic time axis is compiled (one copy of the weights) and each window is padded with
masked frames up to a multiple of `FLOW_PAD`: the flow multiplies every layer by its
frame mask, so frames past the mask change nothing (checked at load: the FP32 flow padded
and not must agree to `EXACT_DB`), and the shapes the plugin meets stay few.

`auto` takes bf16 where the CPU computes in bf16 natively and, on the voice's probe
sentence, the bf16 latent is within `MIN_SNR_DB` of FP32's (a broken plugin or emulated
bf16 lands far below: the bundled voice measured 47-50 dB) and the flow takes at most
`MAX_TIME_RATIO` of FP32's time (the verdict is kept per CPU, like the vocoder's); `bf16`
skips the CPU and timing checks, `fp32` takes ONNX Runtime. Logged `tts_flow` with what
it chose and why. The SNR of the audio is far lower (~23 dB: the decoder turns small
latent changes into phase), so what decides whether bf16 ships is the intelligibility
gate of `tools.judge` (WER and DNSMOS against FP32; docs/performance.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from cosyvoiced.runtime.onnx import OnnxError, run
from cosyvoiced.runtime.openvino import create_ov_sessions
from cosyvoiced.tts.voice.vocoder_precision import TIMED_RUNS, concluded, settled, snr_db

log = structlog.get_logger(__name__)

FLOW_PAD = 32
"""A bf16 flow window is padded with masked frames to a multiple of this many frames."""
EXACT_DB = 90.0
"""Least SNR of the FP32 flow padded against not padded (measured 121-126 dB: rounding)."""


def timed_inputs(feeds: Mapping[str, np.ndarray], frames: int) -> tuple[str, ...]:
    """The inputs that run over time (last axis `frames`; a speaker embedding does not)."""
    return tuple(k for k, x in feeds.items() if x.ndim > 1 and x.shape[-1] == frames)


def pad_frames(feeds: Mapping[str, np.ndarray], timed: Sequence[str], to: int
               ) -> dict[str, np.ndarray]:
    """`feeds` with the `timed` inputs zero-padded to `to` frames: the frame mask's zeros
    mark the padding."""
    return {k: np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, to - x.shape[-1])])
            if k in timed and to > x.shape[-1] else x for k, x in feeds.items()}


class PaddedFlow:
    """A flow session (ONNX Runtime's interface: `run`, `get_inputs`, `get_outputs`) whose
    windows are padded to a multiple of `pad` frames and cut back after the run."""

    def __init__(self, session: Any, timed: Sequence[str], pad: int = FLOW_PAD) -> None:
        self.session = session
        self.timed = tuple(timed)
        """The inputs that run over time (`timed_inputs`), z_p first."""
        self.pad = pad

    def get_inputs(self) -> list[Any]:
        return self.session.get_inputs()

    def get_outputs(self) -> list[Any]:
        return self.session.get_outputs()

    def run(self, outputs: Sequence[str] | None, feeds: Mapping[str, np.ndarray]
            ) -> list[np.ndarray]:
        frames = int(feeds[self.timed[0]].shape[-1])
        to = -(-frames // self.pad) * self.pad
        out = self.session.run(outputs, pad_frames(feeds, self.timed, to))
        return [np.ascontiguousarray(x[..., :frames]) for x in out]


def _cpu_s(session: Any, feeds: Mapping[str, np.ndarray]) -> tuple[float, np.ndarray]:
    t0 = time.process_time()
    out = np.asarray(run(session, dict(feeds))[0], dtype=np.float32)
    return time.process_time() - t0, out


def _measure(fp32: Any, fast: Any, inputs: Mapping[str, np.ndarray], ref: np.ndarray
             ) -> tuple[float, float]:
    """(SNR of the bf16 latent to FP32's, bf16 / FP32 CPU time of the flow over the probe
    sentence, interleaved)."""
    _, out = _cpu_s(fast, inputs)  # one run first: kernels built for the shape
    snr = snr_db(ref.reshape(-1), out.reshape(-1))
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for _ in range(TIMED_RUNS):
        times["fp32"].append(_cpu_s(fp32, inputs)[0])
        times["bf16"].append(_cpu_s(fast, inputs)[0])
    return snr, min(times["bf16"]) / max(min(times["fp32"]), 1e-9)


def pick_flow(setting: str, fp32: Any, graph: Callable[[], bytes],
              inputs: Mapping[str, np.ndarray] | None, *, threads: int,
              cache_dir: str | None, model: str, verdict: Path | None = None,
              key: str | None = None) -> tuple[Any, str]:
    """(the flow session to run, "bf16" | "fp32") for a voice: see the module doc.
    `fp32`: its ONNX Runtime session; `graph()`: the flow graph for OpenVINO, made only
    where it is tried and not kept converted under `cache_dir` by its `key`; `inputs`: the
    flow's inputs for the probe sentence (None: no probe, FP32)."""
    go, known = settled(setting, verdict, "tts_flow", model, inputs is not None)
    if not go or inputs is None:
        return fp32, "fp32"
    frames = int(next(iter(inputs.values())).shape[-1])  # z_p first
    timed = timed_inputs(inputs, frames)
    _, ref = _cpu_s(fp32, inputs)
    _, padded = _cpu_s(fp32, pad_frames(inputs, timed, frames + FLOW_PAD))
    if snr_db(ref.reshape(-1), padded[..., :frames].reshape(-1)) < EXACT_DB:
        log.info("tts_flow", model=model, precision="fp32",
                 reason="frames past the mask change its output: cannot pad windows")
        return fp32, "fp32"
    try:
        dims = {k: [*x.shape[:-1], -1] if k in timed else list(x.shape)
                for k, x in inputs.items()}
        fast = PaddedFlow(create_ov_sessions(graph, shapes=[dims], threads=threads,
                                             precision="bf16", cache_dir=cache_dir,
                                             key=key)[0], timed)
        snr, ratio = known if known is not None else _measure(fp32, fast, inputs, ref)
    except OnnxError as exc:
        log.warning("tts_flow", model=model, precision="fp32", reason=str(exc))
        return fp32, "fp32"
    if concluded(setting, verdict, known, snr, ratio, "tts_flow", model,
                 f"padded to x{FLOW_PAD}"):
        return fast, "bf16"
    return fp32, "fp32"
