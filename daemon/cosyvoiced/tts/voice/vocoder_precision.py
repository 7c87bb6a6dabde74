"""The vocoder's engine and precision, chosen per voice at load (`tts.vocoder`).

A split voice's decoder (latent frames -> audio, ~2/3 of a sentence's synthesis time) may
run in bf16 through OpenVINO's CPU plugin (`runtime/openvino.py`) instead of FP32 on ONNX
Runtime. The plugin builds its kernels for each input shape it meets (a new shape measured
~3x a known one's run: with every sentence's windows of their own length, bf16 came out
1.28x slower than FP32), so bf16 decoders are compiled for fixed window sizes only, the
windows of a first chunk, of a whole chunk and of a last chunk (a whole one with the tail
it took in), with their contexts. `SplitVoice.decode` widens a window to such a size with
more real context where the sentence has the frames (exact); any other window (a sentence
shorter than that) runs FP32. The last chunk's window, measured on the medium sentence at
one thread (no AMX, avx512_bf16): 41 ms in bf16 where FP32 took 67 ms, for ~16 MB more
per worker. The text front (durations) stays FP32 on ONNX Runtime: bf16 there moves frame
counts; the flow has its own choice (`flow_precision.py`). `auto` takes bf16 only where
all of these hold, and logs `tts_vocoder` with what it chose and why:

* the CPU computes in bf16 natively (AMX `amx_bf16`, or `avx512_bf16`): without either,
  bf16 is emulated and no faster;
* on the voice's probe sentence, the bf16 decoder is within `MIN_SNR_DB` of FP32;
* timed on that sentence at load, interleaved with FP32, it takes at most
  `MAX_TIME_RATIO` of FP32's time.

`bf16` skips the CPU and timing checks (the SNR check still holds), `fp32` takes ONNX
Runtime. Listening and WER figures of bf16 against FP32 are in docs/performance.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from cosyvoiced.runtime.onnx import OnnxError, cpu_fingerprint, cpu_flags, run, write_cache_file
from cosyvoiced.runtime.openvino import BF16_FLAGS, bf16_flag, create_ov_sessions
from cosyvoiced.tts.voice.rewrites import DECODER_2D

log = structlog.get_logger(__name__)

VOCODERS = ("auto", "fp32", "bf16")
MIN_SNR_DB = 30.0
"""Least SNR of the bf16 decoder's audio against FP32's on the probe sentence (measured
40-41 dB on the bundled voice; below 30 dB something is wrong with the plugin or the CPU)."""
MAX_TIME_RATIO = 0.85
"""bf16 must take at most this share of FP32's decoder time to be worth a second engine
(measured 0.6 on an AMX Xeon at one thread)."""
TIMED_RUNS = 5


def snr_db(ref: np.ndarray, x: np.ndarray) -> float:
    n = min(ref.size, x.size)
    noise = float(np.sum((ref[:n].astype(np.float64) - x[:n]) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(ref[:n] ** 2.0)) / noise)


def choose(setting: str, flags: frozenset[str], snr: float | None,
           time_ratio: float | None) -> tuple[str, str]:
    """(precision, reason) for a voice's decoder from what was measured (None: not yet)."""
    if setting == "fp32":
        return "fp32", "configured"
    if setting == "auto" and bf16_flag(flags) is None:
        return "fp32", f"no {' or '.join(BF16_FLAGS)} on this CPU"
    if snr is None:
        return "fp32", "bf16 unavailable"
    if snr < MIN_SNR_DB:
        return "fp32", f"bf16 SNR {snr:.1f} dB < {MIN_SNR_DB:.0f} dB"
    if setting == "auto" and (time_ratio is None or time_ratio > MAX_TIME_RATIO):
        return "fp32", f"bf16 not faster ({time_ratio:.2f}x fp32)" if time_ratio else "untimed"
    return "bf16", "configured" if setting == "bf16" else f"{bf16_flag(flags)}, measured faster"


def _timed(session: Any, feeds: Mapping[str, np.ndarray]) -> tuple[float, np.ndarray]:
    """(CPU seconds of this process, audio) of one run: CPU time, not wall time, so a busy
    box (other processes on the core) does not decide the verdict kept for this CPU."""
    t0 = time.process_time()
    out = np.asarray(run(session, dict(feeds))[0], dtype=np.float32).reshape(-1)
    return time.process_time() - t0, out


def window(inputs: Mapping[str, np.ndarray], latent: str, frames: int) -> dict[str, np.ndarray]:
    """`inputs` with `latent` cut (or repeated) to `frames` frames."""
    x = inputs[latent]
    reps = -(-frames // max(1, x.shape[-1]))
    cut = np.ascontiguousarray(np.concatenate([x] * reps, axis=-1)[..., :frames])
    return {**inputs, latent: cut}


def verdict_path(contexts: Path, threads: int, sizes: list[int], kind: str = "vocoder") -> Path:
    """Where a voice's bf16 verdict for its `kind` (vocoder | flow) is kept beside its
    contexts' (per CPU, threads, windows and OpenVINO release)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ov = version("openvino")
    except PackageNotFoundError:
        ov = "none"
    tag = f"cpu{cpu_fingerprint()}-t{threads}-w{'-'.join(map(str, sorted(sizes)))}-ov{ov}"
    return contexts.with_name(contexts.name.split("-contexts-")[0] + f"-{kind}-{tag}.json")


def _read_verdict(path: Path | None) -> tuple[float, float] | None:
    """(SNR dB, time ratio) kept at `path` by `_keep_verdict`, or None."""
    try:
        snr, ratio = json.loads(path.read_text(encoding="utf-8")) if path else (None, None)
    except (OSError, ValueError, TypeError):
        return None
    return (float(snr), float(ratio)) if isinstance(snr, float) and isinstance(ratio, float) \
        else None


def _keep_verdict(path: Path | None, snr: float, ratio: float, what: str) -> None:
    """Keep what was measured for later starts on this CPU (`_read_verdict`)."""
    if path is not None:
        text = json.dumps([round(float(snr), 2), round(float(ratio), 4)])
        write_cache_file(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"),
                         what=what)


def _measure(fp32: Any, fast: Mapping[int, Any], inputs: Mapping[str, np.ndarray],
             latent: str) -> tuple[float, float]:
    """(least SNR over the windows, bf16 / FP32 time of the largest window)."""
    snr = float("inf")
    for size, session in fast.items():
        feeds = window(inputs, latent, size)
        _, ref = _timed(fp32, feeds)  # one run each first: arenas and kernels made
        _, out = _timed(session, feeds)
        snr = min(snr, snr_db(ref, out))
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for _ in range(TIMED_RUNS):  # the chunk window, interleaved: busy moments hit both
        times["fp32"].append(_timed(fp32, feeds)[0])
        times["bf16"].append(_timed(session, feeds)[0])
    return snr, min(times["bf16"]) / max(min(times["fp32"]), 1e-9)


def decoder_2d(decoder: Any) -> bytes:
    """The decoder graph, its convs as 2-D (exact), for OpenVINO: in bf16 on AMX it runs
    2-D convs ~3x faster than the 1-D ones (docs/performance.md)."""
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(decoder)
    try:
        DECODER_2D.apply(model)
    except ValueError:
        return decoder.SerializeToString()
    return model.SerializeToString()


def settled(setting: str, verdict: Path | None, event: str, model: str, probed: bool
            ) -> tuple[bool, tuple[float, float] | None]:
    """Before building a bf16 engine: (whether to try it, the verdict kept for this CPU).
    Not tried (logged `event` with the reason) where the setting or the CPU rules bf16
    out, there is no probe sentence, or the kept verdict already said FP32."""
    flags = cpu_flags()
    wanted = setting == "bf16" or (setting == "auto" and bf16_flag(flags) is not None)
    if not wanted or not probed:
        reason = choose(setting, flags, None, None)[1] if not wanted else "no probe sentence"
        log.info(event, model=model, precision="fp32", reason=reason)
        return False, None
    known = _read_verdict(verdict)
    if known is not None and choose(setting, flags, *known)[0] == "fp32":
        log.info(event, model=model, precision="fp32", reason=choose(setting, flags,
                 *known)[1], snr_db=round(known[0], 1), time_vs_fp32=round(known[1], 3),
                 measured="before")
        return False, known
    return True, known


def concluded(setting: str, verdict: Path | None, known: tuple[float, float] | None,
              snr: float, ratio: float, event: str, model: str, shapes: object) -> bool:
    """After measuring (or reading `known`): keep a new verdict, log `event` with the
    choice, its reason and the `shapes` it was built for; True where bf16 is taken."""
    if known is None:
        _keep_verdict(verdict, snr, ratio, event)
    precision, reason = choose(setting, cpu_flags(), snr, ratio)
    log.info(event, model=model, precision=precision, reason=reason,
             snr_db=round(float(snr), 1), time_vs_fp32=round(ratio, 3), shapes=shapes,
             measured="before" if known is not None else "now")
    return precision == "bf16"


def pick_decoder(setting: str, fp32: Any, decoder: Callable[[], bytes],
                 inputs: Mapping[str, np.ndarray] | None,
                 latent: str, sizes: list[int], *, threads: int, cache_dir: str | None,
                 model: str, verdict: Path | None = None, key: str | None = None
                 ) -> tuple[dict[int, Any], str]:
    """({window frames: bf16 decoder}, "bf16"), or ({}, "fp32"), for a voice: see the module
    doc. `decoder()`: the decoder graph for OpenVINO, made only where it is tried and not
    kept converted under `cache_dir` by its `key`. `inputs`: the decoder's inputs for the
    probe sentence (None: no probe, FP32). `verdict`: where the measured SNR and time ratio
    are kept for this CPU (later starts read them instead of timing again)."""
    go, known = settled(setting, verdict, "tts_vocoder", model, inputs is not None)
    if not go or inputs is None:
        return {}, "fp32"
    order = sorted(set(sizes))
    try:
        built = create_ov_sessions(decoder, shapes=[
            {name: list(a.shape) for name, a in window(inputs, latent, size).items()}
            for size in order], threads=threads, precision="bf16", cache_dir=cache_dir, key=key)
        fast = dict(zip(order, built, strict=True))
        snr, ratio = known if known is not None else _measure(fp32, fast, inputs, latent)
    except OnnxError as exc:
        log.warning("tts_vocoder", model=model, precision="fp32", reason=str(exc))
        return {}, "fp32"
    if concluded(setting, verdict, known, snr, ratio, "tts_vocoder", model, order):
        return fast, "bf16"
    return {}, "fp32"
