"""INT8 recipes for Piper (VITS) voices, and how a recipe picks the nodes it quantizes.

A recipe names the op types to quantize, the part of the graph it touches (node-name
prefixes: `/dec/` is the HiFi-GAN decoder, where almost all the time goes at audio rate)
and the nodes kept FP32 inside that part. The graph groups (`node_group`) are what the
sensitivity sweep (tools/quantize/sweep.py) excludes one at a time.

Measured on en_US-joe-medium (Xeon, AVX-512 VNNI, ORT 1.32, 1 thread, time vs FP32):
Conv-only QDQ in the decoder 0.75x (a Q/DQ pair around every conv); adding the residual
Add and LeakyRelu lets ORT run whole QLinear chains, 0.53x; the flow, duration predictor
and text encoder too, 0.40-0.43x. ConvTranspose in QDQ is no faster than FP32, and
conv_post (the last conv before tanh) in INT8 quantizes the waveform itself to 8 bits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DECODER = "/dec/"
#: conv_post makes the waveform (its INT8 output would be 8-bit audio) and the LeakyRelu
#: feeding it; one output channel, so FP32 costs almost nothing there.
DECODER_POST = ("/dec/LeakyRelu_3", "/dec/conv_post/Conv")
#: The last upsampling stage's residual sums (resblocks 6-8 and the mean of their outputs):
#: at the highest rate, with 32 channels, an INT8 residual there is most of the audible
#: quantization noise (log-mel distance to FP32 0.79 -> 0.62 when kept FP32).
DECODER_LAST_STAGE_SUMS = tuple(f"/dec/resblocks.{b}/{op}" for b in (6, 7, 8)
                                for op in ("Add", "Add_1", "LeakyRelu", "LeakyRelu_1")
                                ) + ("/dec/Add_4", "/dec/Add_5")
#: The last upsampling stage's convs (its upsampler and resblocks 6-8): they run at the
#: audio rate, and their uint8 inputs and outputs put a white noise floor under the
#: quiet and high bands (log-mel distance to FP32 0.155 -> 0.048 when kept FP32, for
#: 0.67x -> 0.81-0.85x the time of FP32).
DECODER_LAST_STAGE_CONVS = ("/dec/ups.2/poly/Conv",) + tuple(
    f"/dec/resblocks.{b}/convs.{c}/Conv" for b in (6, 7, 8) for c in (0, 1))
#: The middle stage's residual sums (resblocks 3-5 and their mean): kept FP32 with its convs
#: INT8, the residual stream there stays float (an 8-bit one is a noise floor DNSMOS hears).
DECODER_MID_STAGE_SUMS = tuple(f"/dec/resblocks.{b}/{op}" for b in (3, 4, 5)
                               for op in ("Add", "Add_1", "LeakyRelu", "LeakyRelu_1")
                               ) + ("/dec/Add_2", "/dec/Add_3")


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str
    """"dynamic" (weights only, activations quantized at run time) or "static" (QDQ)."""
    op_types: tuple[str, ...] = ("MatMul", "Conv")
    scope: tuple[str, ...] = ()
    """Node-name prefixes to quantize; empty: the whole graph."""
    keep_fp32: tuple[str, ...] = ()
    """Node names (exact) or group names (see node_group) left in FP32."""
    weight_type: str = "QInt8"
    per_channel: bool = True
    calibration: str = "MinMax"
    """onnxruntime CalibrationMethod name (static recipes)."""
    percentile: float = 99.999
    """For calibration "Percentile"."""
    poly_upsample: bool = False
    """Rewrite the decoder's ConvTranspose as Conv + depth-to-time first (quantize_graph)."""
    decoder_2d: bool = False
    """Rewrite the decoder's convs as 2-D first (cosyvoiced.tts.voice.rewrites): what stays
    float runs ORT's blocked NCHWc kernels, as FP32 voices do at one thread."""
    activation_type: str = "QUInt8"
    quant_format: str = "QDQ"
    """onnxruntime QuantFormat name: QDQ (ORT fuses the pairs into QLinear kernels) or
    QOperator (QLinear nodes written out)."""


_STATIC = ("Conv", "MatMul")
_CHAINS = ("Conv", "MatMul", "Add", "LeakyRelu")

RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("dyn_quint8_matmul_conv", "dynamic", weight_type="QUInt8", per_channel=False),
    Recipe("dyn_qint8_default", "dynamic", op_types=(), per_channel=False),
    Recipe("dyn_qint8_per_channel", "dynamic"),
    Recipe("static_qdq_per_channel", "static", _STATIC),
    Recipe("static_qdq_per_channel_add_lrelu", "static", _CHAINS),
    Recipe("static_qdq_dec_conv", "static", ("Conv",), scope=(DECODER,)),
    Recipe("static_qdq_dec_add_lrelu", "static", ("Conv", "Add", "LeakyRelu"), scope=(DECODER,)),
    Recipe("static_qdq_dec_add_lrelu_fp32post", "static", ("Conv", "Add", "LeakyRelu"),
           scope=(DECODER,), keep_fp32=DECODER_POST),
    Recipe("static_qdq_add_lrelu_fp32post", "static", _CHAINS, keep_fp32=DECODER_POST),
    Recipe("static_qdq_dec_poly_p9999", "static", ("Conv", "Add", "LeakyRelu"), scope=(DECODER,),
           keep_fp32=DECODER_POST, calibration="Percentile", percentile=99.99,
           poly_upsample=True),
    Recipe("static_qdq_dec_poly_p9999_conv", "static", ("Conv",), scope=(DECODER,),
           keep_fp32=DECODER_POST, calibration="Percentile", percentile=99.99,
           poly_upsample=True),
    Recipe("static_qdq_dec_poly_p9999_last_stage_conv", "static", ("Conv", "Add", "LeakyRelu"),
           scope=(DECODER,), keep_fp32=DECODER_POST + DECODER_LAST_STAGE_SUMS,
           calibration="Percentile", percentile=99.99, poly_upsample=True),
    Recipe("static_qdq_dec_poly_p9999_conv_fp32_last_stage", "static", ("Conv",),
           scope=(DECODER,), keep_fp32=DECODER_POST + DECODER_LAST_STAGE_CONVS,
           calibration="Percentile", percentile=99.99, poly_upsample=True),
    Recipe("static_qdq_dec_poly_p9999_chains_fp32_last_stage", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,),
           keep_fp32=DECODER_POST + DECODER_LAST_STAGE_SUMS + DECODER_LAST_STAGE_CONVS,
           calibration="Percentile", percentile=99.99, poly_upsample=True),
    Recipe("static_qdq_dec_poly_p9999_conv_lrelu", "static", ("Conv", "LeakyRelu"),
           scope=(DECODER,), keep_fp32=DECODER_POST, calibration="Percentile", percentile=99.99,
           poly_upsample=True),
    # The decoder 2-D first: what stays float runs ORT's NCHWc kernels (1-D, the FP32 last
    # stage alone took 2.5x the 2-D FP32 graph's time for it: tools/quantize/profile.py).
    Recipe("static_qdq_dec2d_poly_p9999_chains_fp32_last_stage", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,),
           keep_fp32=DECODER_POST + DECODER_LAST_STAGE_SUMS + DECODER_LAST_STAGE_CONVS,
           calibration="Percentile", percentile=99.99, poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_dec2d_poly_p9999_chains_fp32_last_sums", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,),
           keep_fp32=DECODER_POST + DECODER_LAST_STAGE_SUMS,
           calibration="Percentile", percentile=99.99, poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_dec2d_poly_p9999_chains_fp32post", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,), keep_fp32=DECODER_POST,
           calibration="Percentile", percentile=99.99, poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_dec2d_poly_p999_chains_fp32post", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,), keep_fp32=DECODER_POST,
           calibration="Percentile", percentile=99.9, poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_dec2d_poly_p995_chains_fp32post", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,), keep_fp32=DECODER_POST,
           calibration="Percentile", percentile=99.5, poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_dec2d_poly_p999_chains_fp32_mean", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,),
           keep_fp32=DECODER_POST + ("/dec/Add_4", "/dec/Add_5"),
           calibration="Percentile", percentile=99.9, poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_dec2d_poly_p999_chains_fp32_last_stage", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,),
           keep_fp32=DECODER_POST + DECODER_LAST_STAGE_SUMS + DECODER_LAST_STAGE_CONVS,
           calibration="Percentile", percentile=99.9, poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_dec2d_poly_p999_conv_fp32post", "static", ("Conv",), scope=(DECODER,),
           keep_fp32=DECODER_POST, calibration="Percentile", percentile=99.9,
           poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_dec2d_poly_p999_conv_fp32_last_stage", "static", ("Conv",),
           scope=(DECODER,), keep_fp32=DECODER_POST + DECODER_LAST_STAGE_CONVS,
           calibration="Percentile", percentile=99.9, poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_dec2d_poly_p999_chains0_fp32_last_stage", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,),
           keep_fp32=DECODER_POST + DECODER_MID_STAGE_SUMS + DECODER_LAST_STAGE_SUMS
           + DECODER_LAST_STAGE_CONVS, calibration="Percentile", percentile=99.9,
           poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_dec_poly_p999_chains0_fp32_last_stage", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,),
           keep_fp32=DECODER_POST + DECODER_MID_STAGE_SUMS + DECODER_LAST_STAGE_SUMS
           + DECODER_LAST_STAGE_CONVS, calibration="Percentile", percentile=99.9,
           poly_upsample=True),
    Recipe("static_qdq_dec_poly_p9999_chains0_fp32_last_stage", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,),
           keep_fp32=DECODER_POST + DECODER_MID_STAGE_SUMS + DECODER_LAST_STAGE_SUMS
           + DECODER_LAST_STAGE_CONVS, calibration="Percentile", percentile=99.99,
           poly_upsample=True),
    Recipe("static_qdq_dec_poly_p999_conv_fp32_last_stage", "static", ("Conv",),
           scope=(DECODER,), keep_fp32=DECODER_POST + DECODER_LAST_STAGE_CONVS,
           calibration="Percentile", percentile=99.9, poly_upsample=True),
    Recipe("static_qdq_dec2d_poly_entropy_chains_fp32post", "static",
           ("Conv", "Add", "LeakyRelu"), scope=(DECODER,), keep_fp32=DECODER_POST,
           calibration="Entropy", poly_upsample=True, decoder_2d=True),
    Recipe("static_qdq_2d_poly_p9999_chains_fp32post", "static", _CHAINS, keep_fp32=DECODER_POST,
           calibration="Percentile", percentile=99.99, poly_upsample=True, decoder_2d=True),
)}


_DEC_BLOCK = re.compile(r"^/dec/(resblocks\.\d+|ups\.\d+|conv_pre|conv_post)/")


def node_group(name: str) -> str:
    """The sweep group of a node: decoder blocks one by one (`dec/resblocks.8`,
    `dec/ups.2`, `dec/conv_post`), the decoder's glue between them (`dec/top`), and the
    other sub-networks whole (`flow`, `dp`, `enc_p`); anything else is `other`."""
    m = _DEC_BLOCK.match(name)
    if m:
        return f"dec/{m.group(1)}"
    if name.startswith(DECODER):
        return "dec/top"
    m = re.match(r"^/(flow|dp|enc_p)/", name)
    return m.group(1) if m else "other"


def select_nodes(names: list[str], recipe: Recipe) -> tuple[list[str] | None, list[str]]:
    """(nodes_to_quantize or None for every node, nodes_to_exclude) for quantize_static."""
    include = None
    if recipe.scope:
        include = [n for n in names if n.startswith(recipe.scope)]
    keep = set(recipe.keep_fp32)
    exclude = [n for n in names if n in keep or node_group(n) in keep]
    if include is not None:
        excluded = set(exclude)
        include = [n for n in include if n not in excluded]
    return include, exclude


def with_fp32(recipe: Recipe, groups: tuple[str, ...], name: str | None = None) -> Recipe:
    """The recipe with more nodes or groups kept FP32 (what the sweep builds)."""
    return Recipe(**{**recipe.__dict__, "name": name or recipe.name,
                     "keep_fp32": recipe.keep_fp32 + tuple(groups)})
