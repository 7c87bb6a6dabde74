"""The voice's weights are memory-mapped from the cache: one copy per box, not per worker."""

from __future__ import annotations

import multiprocessing as mp
import os

import numpy as np
import pytest

from cosyvoiced.runtime import onnx as factory
from cosyvoiced.tts.voice.catalog import bundled_voice, load_voice
from cosyvoiced.tts.voice.rewrites import decoder_rewrite

FEEDS = {"input": np.array([[1, 20, 30, 40, 50, 60, 2] * 8], dtype=np.int64),
         "input_lengths": np.array([56], dtype=np.int64),
         "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32)}  # noise off: deterministic


def _rollup() -> dict[str, float]:
    """This process's /proc/self/smaps_rollup, in MB."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[-1] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return out


def _load_and_report(cache_dir: str, conn, go) -> None:
    """Child: load the voice as a worker does, run it, report what loading it cost."""
    before = _rollup()
    voice = load_voice(bundled_voice(), precision="fp32", threads=1, cache_dir=cache_dir)
    assert voice.split is not None  # the default: split at the seam, each part shared
    sentence = voice.split.sentence(FEEDS)
    voice.split.decode_chunk(sentence, 0, sentence.frames)
    after = _rollup()
    conn.send({k: after[k] - before[k] for k in ("Rss", "Pss", "Shared_Clean")})
    go.wait(60)  # stay alive (and mapped) until the parent has heard from every child


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def test_shared_session_gives_the_same_audio(cache_dir):
    files = bundled_voice()
    rewrite = decoder_rewrite(1)
    normal = factory.create_session(files.model_path, threads=1, cache_dir=cache_dir,
                                    rewrite=rewrite)
    shared = factory.create_session(files.model_path, threads=1, cache_dir=cache_dir,
                                    rewrite=rewrite, shared_weights=True)
    assert factory.shared_path_for(files.model_path, cache_dir, rewrite, 1).is_file()
    want = normal.run(None, FEEDS)[0]
    got = shared.run(None, FEEDS)[0]
    assert want.shape == got.shape and want.size > 0
    assert np.array_equal(want, got)  # bit-identical, not merely close


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux smaps")
def test_two_processes_share_the_weight_pages(cache_dir):
    model_mb = os.path.getsize(bundled_voice().model_path) / (1 << 20)
    load_voice(bundled_voice(), precision="fp32", threads=1, cache_dir=cache_dir)  # warm cache
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    procs, seen = [], []
    try:
        for _ in range(2):  # one after the other, as workers and the spare start
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_load_and_report, args=(cache_dir, child, go))
            proc.start()
            procs.append(proc)
            assert parent.poll(120), "child did not load the voice in time"
            seen.append(parent.recv())
    finally:
        go.set()
        for proc in procs:
            proc.join(30)
    second = seen[1]
    # The second process maps the pages the first holds: its PSS grows by about half the
    # weights less than its RSS (today's path copies every weight: the gap is ~0).
    assert second["Rss"] - second["Pss"] > 0.3 * model_mb, second
    assert second["Shared_Clean"] > 0.6 * model_mb, second


def test_unloadable_shared_entry_falls_back_to_the_normal_path(cache_dir):
    files = bundled_voice()
    rewrite = decoder_rewrite(1)
    normal = factory.create_session(files.model_path, threads=1, cache_dir=cache_dir,
                                    rewrite=rewrite)
    shared = factory.shared_path_for(files.model_path, cache_dir, rewrite, 1)
    shared.write_bytes(b"not an ORT model")
    session = factory.create_session(files.model_path, threads=1, cache_dir=cache_dir,
                                     rewrite=rewrite, shared_weights=True)
    assert np.array_equal(session.run(None, FEEDS)[0], normal.run(None, FEEDS)[0])
    assert not shared.exists()  # dropped: the next load builds it again
