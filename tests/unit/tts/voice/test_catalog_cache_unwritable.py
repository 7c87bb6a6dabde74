"""A cache_dir that is read-only or full costs the cache, not the voice: it loads from the
original model with one warning (a real read-only bind mount and a real full tmpfs, in a
mount namespace of their own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

LOAD = """
import json, sys
import numpy as np
import structlog
events = []
def keep(logger, name, ed):
    events.append([ed.get("level", name), ed.get("event")])
    raise structlog.DropEvent
structlog.configure(processors=[structlog.processors.add_log_level, keep])
from cosyvoiced.tts.voice.catalog import bundled_voice, load_voice
FEEDS = {"input": np.array([[1, 20, 30, 40, 50, 60, 2] * 8], dtype=np.int64),
         "input_lengths": np.array([56], dtype=np.int64),
         "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32)}
out = {}
for decode in ("chunked", "clauses"):
    events.clear()
    voice = load_voice(bundled_voice(), precision="fp32", threads=1, cache_dir=sys.argv[1],
                       decode=decode)
    if voice.split is not None:
        s = voice.split.sentence(FEEDS)
        audio = voice.split.decode_chunk(s, 0, s.frames)
    else:
        audio = voice.session.run(None, FEEDS)[0]
    out[decode] = {"samples": int(np.asarray(audio).size),
                   "warnings": [e for lvl, e in events if lvl in ("warning", "error")]}
print(json.dumps(out))
"""

MOUNTS = {
    "read_only": "mount --bind {d} {d} && mount -o remount,bind,ro {d}",
    "full": "mount -t tmpfs -o size=64k tmpfs {d}",
}


@pytest.mark.parametrize("kind", sorted(MOUNTS))
def test_voice_loads_from_an_unwritable_cache_dir_with_one_warning(kind, tmp_path: Path):
    cache = tmp_path / "cache"
    cache.mkdir()
    script = tmp_path / "load.py"
    script.write_text(LOAD)
    shell = f'{MOUNTS[kind].format(d=cache)} && exec "$@"'
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", shell,
                          "sh", sys.executable, str(script), str(cache)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.splitlines()[-1])
    for decode, r in got.items():
        assert r["samples"] > 1000, (decode, r)
        assert len(r["warnings"]) == 1, (decode, r["warnings"])
        assert r["warnings"][0].endswith(("_cache_unwritable", "_cache_write_failed")), r
