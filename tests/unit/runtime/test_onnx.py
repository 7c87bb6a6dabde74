"""The one ONNX session factory: options, the optimized-model cache, typed errors."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from cosyvoiced.runtime import onnx as factory
from cosyvoiced.runtime.onnx import OnnxError, cache_path_for, create_session


@pytest.fixture
def tiny_model(tmp_path):
    """y = relu(x @ W + b) followed by an Identity (something for the optimizer to remove)."""
    w = helper.make_tensor("W", TensorProto.FLOAT, [4, 3], np.arange(12, dtype=np.float32).tolist())
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [0.5, -100.0, 1.0])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Identity", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    return path


def expected(x):
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    return np.maximum(x @ w + np.array([0.5, -100.0, 1.0], dtype=np.float32), 0)


def test_session_options_are_explicit(tiny_model, monkeypatch):
    seen = {}
    real = ort.InferenceSession

    def spy(model, sess_options=None, providers=None):
        seen.update(intra=sess_options.intra_op_num_threads, inter=sess_options.inter_op_num_threads,
                    mode=sess_options.execution_mode, level=sess_options.graph_optimization_level,
                    providers=providers)
        return real(model, sess_options=sess_options, providers=providers)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    sess = create_session(tiny_model, threads=1)
    assert seen == {"intra": 1, "inter": 1, "mode": ort.ExecutionMode.ORT_SEQUENTIAL,
                    "level": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                    "providers": ["CPUExecutionProvider"]}
    assert sess.get_providers() == ["CPUExecutionProvider"]
    x = np.ones((2, 4), dtype=np.float32)
    np.testing.assert_allclose(factory.run(sess, {"x": x})[0], expected(x))


def test_a_profiled_session_writes_each_nodes_time(tiny_model, tmp_path):
    import json

    sess = create_session(tiny_model, threads=1, profile_prefix=str(tmp_path / "p"))
    x = np.ones((2, 4), dtype=np.float32)
    np.testing.assert_allclose(factory.run(sess, {"x": x})[0], expected(x))
    trace = json.loads((tmp_path / sess.end_profiling()).read_text())
    assert [e for e in trace if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    assert not create_session(tiny_model, threads=1).get_session_options().enable_profiling


def test_optimized_model_is_cached_and_reused(tiny_model, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cached = cache_path_for(tiny_model, cache)
    assert ort.__version__ in cached.name and "extended" in cached.name
    sess = create_session(tiny_model, cache_dir=cache)
    assert cached.is_file()
    # The cached graph is the optimized one: the Identity is gone.
    assert "Identity" not in {n.op_type for n in onnx.load(str(cached)).graph.node}
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected(x), rtol=1e-5)
    # Second time: loaded from the cache, no optimization pass writes a file.
    writes = []
    monkeypatch.setattr(factory, "_write_cache", lambda *a: writes.append(a) or False)
    sess2 = create_session(tiny_model, cache_dir=cache)
    assert writes == []
    np.testing.assert_allclose(sess2.run(None, {"x": x})[0], expected(x), rtol=1e-5)


def test_cache_key_changes_with_the_model(tiny_model, tmp_path):
    before = cache_path_for(tiny_model, tmp_path)
    model = onnx.load(str(tiny_model))
    model.graph.initializer[1].float_data[0] = 2.0
    onnx.save(model, str(tiny_model))
    assert cache_path_for(tiny_model, tmp_path) != before


def test_corrupt_cache_entry_falls_back_to_the_model(tiny_model, tmp_path):
    cache = tmp_path / "cache"
    cached = cache_path_for(tiny_model, cache)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not a model")
    sess = create_session(tiny_model, cache_dir=cache)
    x = np.ones((1, 4), dtype=np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected(x))
    assert not cached.exists()


def test_unwritable_cache_dir_still_loads(tiny_model, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    sess = create_session(tiny_model, cache_dir=blocker / "sub")  # cannot mkdir under a file
    assert sess.get_inputs()[0].name == "x"


def test_errors_are_typed(tmp_path, tiny_model):
    with pytest.raises(OnnxError) as err:
        create_session(tmp_path / "missing.onnx")
    assert err.value.code == "onnx_missing_model"
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    with pytest.raises(OnnxError) as err:
        create_session(bad)
    assert err.value.code == "onnx_load"
    with pytest.raises(OnnxError) as err:
        create_session(tiny_model, threads=0)
    assert err.value.code == "onnx_threads"
    sess = create_session(tiny_model)
    with pytest.raises(OnnxError) as err:
        factory.run(sess, {"x": np.ones((1, 5), dtype=np.float32)})
    assert err.value.code == "onnx_run"


@pytest.mark.parametrize("shared", [False, True])
def test_a_session_without_the_arena_gives_the_same_output(tiny_model, tmp_path, shared):
    x = np.random.default_rng(5).standard_normal((7, 4)).astype(np.float32)
    seen = []
    real = ort.InferenceSession

    def spy(model, sess_options=None, providers=None):
        seen.append(sess_options.enable_cpu_mem_arena)
        return real(model, sess_options=sess_options, providers=providers)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ort, "InferenceSession", spy)
        plain = create_session(tiny_model, cache_dir=tmp_path, shared_weights=shared)
        seen.clear()
        lean = create_session(tiny_model, cache_dir=tmp_path, shared_weights=shared,
                              arena=False)
    assert seen == [False]  # the session that runs (the caches were written before)
    assert np.array_equal(lean.run(None, {"x": x})[0], plain.run(None, {"x": x})[0])
    np.testing.assert_allclose(lean.run(None, {"x": x})[0], expected(x), rtol=1e-6)
