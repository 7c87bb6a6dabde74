"""INT8 decoders through OpenVINO and NNCF: the voice's decoder as the daemon's bf16 path
gets it, quantized with `nncf.quantize` (or `nncf.quantize_with_accuracy_control`).

The decoder is cut at the latent seam (`cosyvoiced.tts.voice.seam`), its convs made 2-D
(`vocoder_precision.decoder_2d`, as OpenVINO runs bf16 decoders), read by OpenVINO with a
dynamic time axis, calibrated on the latents of the calibration sentences (front and flow
of a seeded copy at the voice's scales, as the ORT recipes calibrate) and saved as IR; it
is compiled for each fixed window the daemon decodes (`compile_windows`). A variant
(`OvVariant`) names NNCF's knobs: preset, fast or full bias correction, SmoothQuant for
convs, nodes kept float (`ignored_scope`), a range estimator,
or a log-mel bound for the accuracy-control flow. Timing and the gate: `ovgate.py`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tools.quantize.gate import logmel_l1
from tools.quantize.recipes import (
    DECODER_LAST_STAGE_CONVS,
    DECODER_LAST_STAGE_SUMS,
    DECODER_MID_STAGE_SUMS,
    DECODER_POST,
)

#: conv_post and the LeakyRelu before it: the waveform stays float.
KEEP_POST = DECODER_POST
#: And the last stage's residual stream (resblocks 6-8's sums and their mean).
KEEP_LAST_STREAM = DECODER_POST + DECODER_LAST_STAGE_SUMS
#: And the middle stage's (resblocks 3-5).
KEEP_STREAMS = KEEP_LAST_STREAM + DECODER_MID_STAGE_SUMS
#: The whole last stage (its upsampler, here a ConvTranspose, and resblocks 6-8's convs
#: too): what the ORT variant that passed the full gate keeps float.
KEEP_LAST_STAGE = KEEP_LAST_STREAM + ("/dec/ups.2/ConvTranspose",) + DECODER_LAST_STAGE_CONVS


@dataclass(frozen=True)
class OvVariant:
    name: str
    preset: str = "performance"
    """NNCF preset: performance (symmetric activations) or mixed (asymmetric)."""
    fast_bias_correction: bool = True
    smooth_quant_conv: float | None = None
    """SmoothQuant's alpha for convolutions (None: off, NNCF's default for convs). NNCF
    runs SmoothQuant for the transformer model type only: set, the variant is quantized
    as one (its preset given outright, so only SmoothQuant changes)."""
    per_channel_activations: bool = False
    keep_float: tuple[str, ...] = ()
    """ONNX node names (the decoder's) kept float: NNCF's ignored_scope."""
    range_estimator: str | None = None
    """nncf RangeEstimatorParametersSet name for activations (None: NNCF's default)."""
    max_logmel_drop: float | None = None
    """Set: `quantize_with_accuracy_control`, reverting layers to float until the log-mel
    L1 to FP32's audio on held-out sentences is at most this (Whisper's log-mel units)."""
    poly_upsample: bool = False
    """The upsamplers' ConvTranspose as Conv + depth-to-time first (tools/quantize/graph.py,
    exact): OpenVINO runs an INT8 ConvTranspose on its f32 kernels, an INT8 Conv on i8."""


VARIANTS: dict[str, OvVariant] = {v.name: v for v in (
    OvVariant("ov_default"),
    OvVariant("ov_fp32post", keep_float=KEEP_POST),
    OvVariant("ov_fp32post_mixed", preset="mixed", keep_float=KEEP_POST),
    OvVariant("ov_poly_fp32post", keep_float=KEEP_POST, poly_upsample=True),
    OvVariant("ov_poly_fp32post_fullbc", fast_bias_correction=False, keep_float=KEEP_POST,
              poly_upsample=True),
    OvVariant("ov_poly_fp32post_mixed", preset="mixed", keep_float=KEEP_POST,
              poly_upsample=True),
    OvVariant("ov_poly_fp32post_mixed_fullbc", preset="mixed", fast_bias_correction=False,
              keep_float=KEEP_POST, poly_upsample=True),
    OvVariant("ov_poly_fp32post_quantile", range_estimator="MEAN_QUANTILE",
              keep_float=KEEP_POST, poly_upsample=True),
    OvVariant("ov_poly_fp32post_sq", smooth_quant_conv=0.5, keep_float=KEEP_POST,
              poly_upsample=True),
    OvVariant("ov_poly_fp32_last_stream", keep_float=KEEP_LAST_STREAM, poly_upsample=True),
    OvVariant("ov_poly_fp32_last_stream_mixed_fullbc", preset="mixed",
              fast_bias_correction=False, keep_float=KEEP_LAST_STREAM, poly_upsample=True),
    OvVariant("ov_poly_fp32_streams", keep_float=KEEP_STREAMS, poly_upsample=True),
    OvVariant("ov_poly_fp32_last_stage", keep_float=KEEP_LAST_STAGE, poly_upsample=True),
    OvVariant("ov_poly_accuracy_mixed_l1_004", preset="mixed", keep_float=KEEP_POST,
              max_logmel_drop=0.04, poly_upsample=True),
    OvVariant("ov_accuracy_sq_l1_004", smooth_quant_conv=0.5, keep_float=KEEP_POST,
              max_logmel_drop=0.04),
    # per-channel activations: NNCF refuses them for convs ("incompatible with HW
    # capabilities", the CPU's config quantizes activations per tensor)
)}


CONVS = ("Convolution", "GroupConvolution", "ConvolutionBackpropData",
         "GroupConvolutionBackpropData")


def float_names(model: Any, names: Sequence[str]) -> list[str]:
    """The OpenVINO ops that ONNX nodes `names` became, for NNCF's ignored_scope: a Conv is
    `NAME/WithoutBiases` + its bias Add `NAME`, a ConvTranspose an unnamed backprop conv +
    the bias Add `NAME` (the conv found through that Add), a LeakyRelu a PRelu `NAME`."""
    wanted = set(names)
    found = []
    for op in model.get_ordered_ops():
        name = op.get_friendly_name()
        if name in wanted or name.removesuffix("/WithoutBiases") in wanted:
            found.append(name)
            src = op.input_value(0).get_node()
            if op.get_type_name() == "Add" and src.get_type_name() in CONVS:
                found.append(src.get_friendly_name())
    return sorted(set(found))


def decoder_graph(model_path: str | Path, poly_upsample: bool = False) -> tuple[bytes, str]:
    """(the voice's decoder graph, its convs 2-D, as bytes; its latent input's name): the
    graph the daemon's bf16 path compiles (`poly_upsample`: its ConvTranspose rewritten)."""
    import onnx

    from cosyvoiced.tts.voice.seam import find_flow_seam, find_seam, split_flow, split_model
    from cosyvoiced.tts.voice.vocoder_precision import decoder_2d

    model = onnx.load(str(model_path))
    seam = find_seam(model)
    if seam is None or len(seam.inputs) != 1:
        raise ValueError(f"{model_path}: no latent seam with one decoder input")
    flow = find_flow_seam(model, seam)
    decoder = split_flow(model, seam, flow)[2] if flow is not None else split_model(model, seam)[1]
    graph = decoder_2d(decoder)
    if poly_upsample:
        from tools.quantize.graph import rewrite_conv_transpose

        two_d = onnx.ModelProto.FromString(graph)
        if not rewrite_conv_transpose(two_d):
            raise ValueError(f"{model_path}: no ConvTranspose to rewrite")
        graph = two_d.SerializeToString()
    return graph, seam.latent


def ov_model(graph: bytes, latent: str, channels: int) -> Any:
    """The decoder as an OpenVINO model, its time axis dynamic."""
    import openvino as ov

    return ov.convert_model(io.BytesIO(graph),
                            input=[(latent, ov.PartialShape([1, channels, -1]))])


def logmel(audio: np.ndarray, rate_hz: int) -> np.ndarray:
    """Whisper's log-mel (80 bands) of `audio` at 16 kHz (what `cli.fidelity` compares)."""
    import soxr
    from faster_whisper.feature_extractor import FeatureExtractor

    clip = np.asarray(soxr.resample(audio.reshape(-1), rate_hz, 16000), dtype=np.float32)
    return FeatureExtractor(feature_size=80)(clip, padding=0)


def _advanced(v: OvVariant) -> Any:
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
        QuantizationParameters,
    )
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    kw: dict[str, Any] = {}
    if v.smooth_quant_conv is not None:
        kw["smooth_quant_alphas"] = AdvancedSmoothQuantParameters(convolution=v.smooth_quant_conv)
    if v.per_channel_activations:
        kw["activations_quantization_params"] = QuantizationParameters(per_channel=True)
    if v.range_estimator is not None:
        kw["activations_range_estimator_params"] = getattr(RangeEstimatorParametersSet,
                                                           v.range_estimator)
    return AdvancedQuantizationParameters(**kw)


def quantize(model: Any, calibration: Sequence[dict[str, np.ndarray]], variant: OvVariant,
             validation: Sequence[tuple[dict[str, np.ndarray], np.ndarray]] = (),
             rate_hz: int = 22050) -> Any:
    """`model` (an OpenVINO model) quantized by NNCF as `variant` says, calibrated on
    `calibration` (decoder inputs). An accuracy-control variant validates on `validation`:
    (decoder inputs, FP32's log-mel of its audio) pairs, metric 1 - the mean log-mel L1."""
    import nncf

    common: dict[str, Any] = {
        "preset": getattr(nncf.QuantizationPreset, variant.preset.upper()),
        "subset_size": len(calibration),
        "fast_bias_correction": variant.fast_bias_correction,
        "ignored_scope": nncf.IgnoredScope(names=float_names(model, variant.keep_float),
                                           validate=False),
    }
    if variant.smooth_quant_conv is not None:
        common["model_type"] = nncf.ModelType.TRANSFORMER
    data = nncf.Dataset(list(calibration))
    if variant.max_logmel_drop is None:
        return nncf.quantize(model, data, advanced_parameters=_advanced(variant), **common)
    if not validation:
        raise ValueError(f"{variant.name}: accuracy control needs validation sentences")

    def validate(compiled: Any, items: Iterable[tuple[dict[str, np.ndarray], np.ndarray]]
                 ) -> tuple[float, list[float]]:
        dists = [logmel_l1(logmel(np.asarray(compiled(x)[0]), rate_hz), ref)
                 for x, ref in items]
        # 1 - L1 (FP32: 1): NNCF divides by the float model's metric even for an absolute drop
        return 1.0 - float(np.mean(dists)), [1.0 - d for d in dists]

    return nncf.quantize_with_accuracy_control(
        model, data, nncf.Dataset(list(validation), lambda item: item[0]), validate,
        max_drop=variant.max_logmel_drop, advanced_quantization_parameters=_advanced(variant),
        **common)


def int8_summary(model: Any) -> dict[str, Any]:
    """What NNCF left in an OpenVINO model: FakeQuantize count, the convs that read a
    quantized input (`int8_convs`) and those that stay float (`float_convs`, by name)."""
    fq, int8, flt = 0, [], []
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind == "FakeQuantize":
            fq += 1
        elif kind in CONVS:
            src = op.input_value(0).get_node().get_type_name()
            (int8 if src == "FakeQuantize" else flt).append(op.get_friendly_name())
    return {"fake_quantize": fq, "int8_convs": int8, "float_convs": flt}


def kernels(session: Any) -> dict[str, int]:
    """How many of a compiled decoder's convs ran which kernel: `layer kernel precision`
    (e.g. `Convolution brgconv_avx512_amx_i8 i8`: AMX tiles; `..._vnni...` or
    `brgconv_avx512_i8`: VNNI), from OpenVINO's runtime model."""
    counts: dict[str, int] = {}
    for op in session.compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer = info["layerType"].astype(str)
        if "onv" in layer:  # Convolution, Deconvolution
            key = f"{layer} {info['primitiveType'].astype(str)} {info['runtimePrecision'].astype(str)}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def compile_windows(model: Any, latent: str, channels: int, windows: Sequence[int],
                    threads: int = 1, precision: str = "f32",
                    pin: bool = True) -> dict[int, Any]:
    """{window frames: session} of `model` (a quantized decoder) compiled for each fixed
    window, as `runtime.openvino.create_ov_sessions` compiles bf16 decoders (one stream,
    latency hint, no runtime cache), the float parts at `precision`, `threads` threads
    (pinned when `pin`)."""
    import openvino as ov

    from cosyvoiced.runtime.openvino import OvSession

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
              "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision,
              "ENABLE_CPU_PINNING": pin, "CPU_RUNTIME_CACHE_CAPACITY": 0}
    out = {}
    for size in sorted(set(windows)):
        one = model.clone()
        one.reshape({latent: ov.PartialShape([1, channels, size])})
        out[size] = OvSession(core.compile_model(one, "CPU", config), f"int8-{precision}")
    return out


def build(model: Any, variant: OvVariant, out: Path,
          calibration: Callable[[], Sequence[dict[str, np.ndarray]]],
          validation: Callable[[], Sequence[tuple[dict[str, np.ndarray], np.ndarray]]],
          rate_hz: int) -> Any:
    """The variant's IR at `out` (.xml): read if there, else quantized and saved."""
    import openvino as ov

    if out.is_file():
        return ov.Core().read_model(str(out))
    q = quantize(model, calibration(), variant,
                 validation() if variant.max_logmel_drop is not None else (), rate_hz)
    out.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(q, str(out), compress_to_fp16=False)
    return q
