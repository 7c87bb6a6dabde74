"""OpenVINO + NNCF INT8 decoders (tools/quantize/ovint8.py) on a small conv decoder: real
NNCF, real OpenVINO: the quantized IR holds INT8 convs and stays close to the float
model, a node kept float stays float, and accuracy control reverts layers to float."""

from __future__ import annotations

import numpy as np
import pytest

CHANNELS, HOP_CHANNELS = 8, 16
LATENT = "latent"


def small_decoder() -> bytes:
    """A HiFi-GAN-shaped stack, named as Piper's decoder: conv_pre, an upsampler (x2), a
    residual block, conv_post and tanh (1-D convs on (1, C, T))."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    nodes, inits = [], []

    def conv(name: str, x: str, y: str, cin: int, cout: int, k: int) -> None:
        w = (rng.standard_normal((cout, cin, k)) / np.sqrt(cin * k)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.05).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.w"),
                      numpy_helper.from_array(b, f"{name}.b")])
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [y], name=name,
                                      kernel_shape=[k], pads=[k // 2, k // 2]))

    conv("/dec/conv_pre/Conv", LATENT, "a", CHANNELS, HOP_CHANNELS, 7)
    nodes.append(helper.make_node("LeakyRelu", ["a"], ["a1"], name="/dec/LeakyRelu", alpha=0.1))
    w = (rng.standard_normal((HOP_CHANNELS, HOP_CHANNELS, 4)) / 8).astype(np.float32)
    inits += [numpy_helper.from_array(w, "up.w"),
              numpy_helper.from_array(np.full(HOP_CHANNELS, 0.01, np.float32), "up.b")]
    nodes.append(helper.make_node("ConvTranspose", ["a1", "up.w", "up.b"], ["b"],
                                  name="/dec/ups.0/ConvTranspose", kernel_shape=[4],
                                  strides=[2], pads=[1, 1]))
    conv("/dec/resblocks.0/convs.0/Conv", "b", "c", HOP_CHANNELS, HOP_CHANNELS, 3)
    nodes.append(helper.make_node("LeakyRelu", ["c"], ["d"], name="/dec/resblocks.0/LeakyRelu",
                                  alpha=0.1))
    conv("/dec/resblocks.0/convs.1/Conv", "d", "e", HOP_CHANNELS, HOP_CHANNELS, 3)
    nodes.append(helper.make_node("Add", ["b", "e"], ["f"], name="/dec/resblocks.0/Add"))
    nodes.append(helper.make_node("LeakyRelu", ["f"], ["g"], name="/dec/LeakyRelu_3",
                                  alpha=0.01))
    conv("/dec/conv_post/Conv", "g", "h", HOP_CHANNELS, 1, 7)
    nodes.append(helper.make_node("Tanh", ["h"], ["output"], name="/dec/Tanh"))
    graph = helper.make_graph(
        nodes, "dec", [helper.make_tensor_value_info(LATENT, TensorProto.FLOAT, [1, CHANNELS, None])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def latents(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{LATENT: rng.standard_normal((1, CHANNELS, int(t))).astype(np.float32)}
            for t in rng.integers(400, 900, n)]


@pytest.fixture(scope="module")
def ov8(repo_root):
    from tools.quantize import ovint8

    return ovint8, ovint8.ov_model(small_decoder(), LATENT, CHANNELS)


def snr_db(ref: np.ndarray, x: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((ref - x) ** 2)))


def run(model, x: dict[str, np.ndarray]) -> np.ndarray:
    import openvino as ov

    return np.asarray(ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(x)[0])


def test_quantized_ir_runs_int8_convs_close_to_float(ov8, tmp_path):
    ovint8, model = ov8
    variant = ovint8.OvVariant("t")
    q = ovint8.build(model, variant, tmp_path / "t.xml", lambda: latents(8, 1), list, 22050)
    assert (tmp_path / "t.xml").is_file() and (tmp_path / "t.bin").is_file()
    summary = ovint8.int8_summary(q)
    assert summary["fake_quantize"] >= 4
    assert len(summary["int8_convs"]) == 5 and summary["float_convs"] == []
    again = ovint8.build(model, variant, tmp_path / "t.xml", list, list, 22050)  # read back
    assert ovint8.int8_summary(again) == summary
    # compiled for a fixed window, as the daemon's windows are; close to the float model
    x = latents(1, 99)[0]
    x[LATENT] = np.ascontiguousarray(x[LATENT][..., :512])
    session = ovint8.compile_windows(again, LATENT, CHANNELS, [512], threads=1, pin=False)[512]
    out, ref = session.run(None, x)[0], run(model, x)
    assert out.shape == ref.shape == (1, 1, 1024)
    assert 15.0 < snr_db(ref, out) < 80.0  # quantized (not exact), and not broken


def test_ignored_scope_keeps_conv_post_float(ov8):
    ovint8, model = ov8
    q = ovint8.quantize(model, latents(8, 1),
                        ovint8.OvVariant("post", keep_float=ovint8.KEEP_POST))
    summary = ovint8.int8_summary(q)
    assert summary["float_convs"] == ["/dec/conv_post/Conv/WithoutBiases"]
    assert len(summary["int8_convs"]) == 4
    # an upsampler kept float: OpenVINO's backprop conv behind its bias Add
    up = ovint8.int8_summary(ovint8.quantize(model, latents(8, 1), ovint8.OvVariant(
        "up", keep_float=("/dec/ups.0/ConvTranspose",))))
    assert len(up["float_convs"]) == 1 and len(up["int8_convs"]) == 4
    assert up["float_convs"][0] not in summary["float_convs"]
    full_bc = ovint8.quantize(model, latents(8, 1), ovint8.OvVariant(
        "bc", fast_bias_correction=False, preset="mixed", keep_float=ovint8.KEEP_POST))
    assert ovint8.int8_summary(full_bc)["float_convs"] == summary["float_convs"]


def test_accuracy_control_reverts_layers_to_float(ov8):
    ovint8, model = ov8
    held = latents(3, 5)
    validation = [(x, ovint8.logmel(run(model, x), 22050)) for x in held]
    plain = ovint8.int8_summary(ovint8.quantize(model, latents(8, 1), ovint8.OvVariant("p")))
    tight = ovint8.quantize(model, latents(8, 1), ovint8.OvVariant("a", max_logmel_drop=1e-4),
                            validation, 22050)
    summary = ovint8.int8_summary(tight)
    assert len(summary["int8_convs"]) < len(plain["int8_convs"])
    dist = np.mean([ovint8.logmel_l1(ovint8.logmel(run(tight, x), 22050), ref)
                    for x, ref in validation])
    assert dist <= 1e-4 or summary["int8_convs"] == []


def test_float_names_are_what_openvino_made_of_the_onnx_nodes(ov8):
    ovint8, model = ov8
    names = ovint8.float_names(model, ("/dec/conv_post/Conv", "/dec/LeakyRelu_3", "/dec/nope"))
    assert names == ["/dec/LeakyRelu_3", "/dec/conv_post/Conv",
                     "/dec/conv_post/Conv/WithoutBiases"]
    up = ovint8.float_names(model, ("/dec/ups.0/ConvTranspose",))
    assert len(up) == 2 and "/dec/ups.0/ConvTranspose" in up
    kinds = {op.get_friendly_name(): op.get_type_name() for op in model.get_ordered_ops()}
    assert sorted(kinds[n] for n in up) == ["Add", "ConvolutionBackpropData"]


def test_smooth_quant_for_convs_is_applied(ov8):
    ovint8, model = ov8
    q = ovint8.quantize(model, latents(8, 1), ovint8.VARIANTS["ov_poly_fp32post_sq"])
    assert any("nncf_smooth_quant" in op.get_friendly_name() for op in q.get_ordered_ops())
    assert ovint8.int8_summary(q)["float_convs"] == ["/dec/conv_post/Conv/WithoutBiases"]


def test_kernels_name_the_int8_convs_openvino_ran(ov8):
    ovint8, model = ov8
    q = ovint8.quantize(model, latents(8, 1), ovint8.OvVariant("post", keep_float=ovint8.KEEP_POST))
    session = ovint8.compile_windows(q, LATENT, CHANNELS, [256], threads=1, pin=False)[256]
    counts = ovint8.kernels(session)
    assert sum(counts.values()) == 5  # conv_pre, the upsampler, 2 in the resblock, conv_post
    assert sum(n for k, n in counts.items() if k.endswith(" i8")) >= 4
    assert sum(n for k, n in counts.items() if k.endswith(" f32")) >= 1  # conv_post


def test_poly_upsampler_runs_on_int8_conv_kernels(ov8):
    import onnx
    from tools.quantize.graph import rewrite_conv_transpose

    ovint8, model = ov8
    graph = onnx.ModelProto.FromString(small_decoder())
    assert rewrite_conv_transpose(graph) == 1
    poly = ovint8.ov_model(graph.SerializeToString(), LATENT, CHANNELS)
    x = latents(1, 3)[0]
    assert np.abs(run(poly, x) - run(model, x)).max() < 1e-5  # exact up to rounding
    q = ovint8.quantize(poly, latents(8, 1), ovint8.OvVariant("p", keep_float=ovint8.KEEP_POST))
    counts = ovint8.kernels(ovint8.compile_windows(q, LATENT, CHANNELS, [256], pin=False)[256])
    assert not any(k.startswith("Deconvolution") for k in counts)
    assert sum(n for k, n in counts.items() if k.startswith("Convolution") and k.endswith("i8")) == 4
