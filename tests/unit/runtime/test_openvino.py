"""OpenVINO sessions from a graph kept converted and compiled in the cache: made once,
imported after."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from cosyvoiced.runtime.onnx import OnnxError
from cosyvoiced.runtime.openvino import create_ov_sessions


def conv_graph() -> bytes:
    """x (1, 4, T) -> a 1-D conv (kernel 3, same padding), time dynamic and rank known
    only from the shapes given (as the voices' split graphs)."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4, 3],
                           np.random.default_rng(0).standard_normal(48).astype(np.float32))
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, None)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


class Maker:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> bytes:
        self.calls += 1
        return conv_graph()


def run(session, frames: int) -> np.ndarray:
    x = np.ones((1, 4, frames), np.float32)
    return session.run(None, {"x": x})[0]


def test_a_graph_is_converted_once_and_read_back_on_later_starts(tmp_path):
    maker = Maker()
    shapes = [{"x": [1, 4, -1]}]
    first = create_ov_sessions(maker, shapes=shapes, precision="f32", cache_dir=tmp_path,
                               key="conv")[0]
    assert maker.calls == 1
    (xml,) = (tmp_path / "openvino").glob("conv-*.xml")  # kept, with its .bin
    (blob,) = (tmp_path / "openvino").glob("conv-*.blob")  # and compiled
    xml.unlink()  # a later start imports the compiled graph: it reads no IR
    later = create_ov_sessions(maker, shapes=shapes, precision="f32", cache_dir=tmp_path,
                               key="conv")[0]
    assert maker.calls == 1  # the ONNX graph was not made again
    for frames in (5, 37):
        np.testing.assert_allclose(run(later, frames), run(first, frames), rtol=1e-6)
        assert run(later, frames).shape == (1, 4, frames)


def test_without_a_key_or_cache_it_converts_every_time(tmp_path):
    maker = Maker()
    for _ in range(2):
        create_ov_sessions(maker, shapes=[{"x": [1, 4, 8]}], precision="f32",
                           cache_dir=tmp_path)
    create_ov_sessions(maker, shapes=[{"x": [1, 4, 8]}], precision="f32", key="conv")
    assert maker.calls == 3
    assert not list(tmp_path.glob("openvino/*.xml"))


def test_a_damaged_compiled_graph_is_compiled_again_from_the_kept_ir(tmp_path):
    maker = Maker()
    shapes = [{"x": [1, 4, 8]}, {"x": [1, 4, 16]}]
    create_ov_sessions(maker, shapes=shapes, precision="f32", cache_dir=tmp_path, key="conv")
    blobs = sorted((tmp_path / "openvino").glob("conv-*.blob"))
    assert len(blobs) == 2  # one per shape
    blobs[0].write_bytes(b"not a compiled graph")
    sessions = create_ov_sessions(maker, shapes=shapes, precision="f32", cache_dir=tmp_path,
                                  key="conv")
    assert maker.calls == 1 and [run(s, n).shape for s, n in zip(sessions, (8, 16),
                                                                  strict=True)] == [
        (1, 4, 8), (1, 4, 16)]
    assert blobs[0].read_bytes() != b"not a compiled graph"  # replaced


def test_a_damaged_kept_graph_is_converted_again(tmp_path):
    maker = Maker()
    shapes = [{"x": [1, 4, 8]}]
    create_ov_sessions(maker, shapes=shapes, precision="f32", cache_dir=tmp_path, key="conv")
    (xml,) = (tmp_path / "openvino").glob("conv-*.xml")
    xml.write_text("<not a model")
    for blob in (tmp_path / "openvino").glob("conv-*.blob"):
        blob.unlink()
    session = create_ov_sessions(maker, shapes=shapes, precision="f32", cache_dir=tmp_path,
                                 key="conv")[0]
    assert maker.calls == 2 and run(session, 8).shape == (1, 4, 8)


def test_a_graph_it_cannot_compile_is_a_typed_error(tmp_path):
    with pytest.raises(OnnxError) as err:
        create_ov_sessions(lambda: b"not onnx", shapes=[{"x": [1, 4, 8]}], cache_dir=tmp_path,
                           key="bad")
    assert err.value.code == "openvino_compile"


def test_released_models_run_again_the_same_and_dead_ones_are_not_kept():
    import gc

    from cosyvoiced.runtime.openvino import release_memory

    gc.collect()
    before = release_memory()
    sessions = create_ov_sessions(Maker(), shapes=[{"x": [1, 4, 16]}, {"x": [1, 4, 32]}],
                                  precision="f32")
    want = [run(s, n) for s, n in zip(sessions, (16, 32), strict=True)]
    assert release_memory() == before + 2
    for s, n, w in zip(sessions, (16, 32), want, strict=True):
        np.testing.assert_array_equal(run(s, n), w)  # its buffers made again
    del sessions, s
    gc.collect()
    assert release_memory() == before
