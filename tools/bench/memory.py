"""Suite `memory`: what one more inference worker costs in memory (PSS), and where it goes.

1. The daemon (dev config, no warm spare, the prompt cache off; once first, unmeasured,
   so what a cold cache compiles is not in the figures) started with 1, then 2
   inference workers on CPUs 0-1; a short and a long TTS request served over HTTP on
   every worker at once (a worker's buffers grow with its longest run: an idle worker
   under-states it), a few seconds to settle, then the PSS of its process tree (each
   process's /proc/PID/smaps_rollup summed). The difference is what an added worker
   costs (target <= 100 MB); the same with the vocoder and flow in FP32 (`tts.vocoder`,
   `tts.flow` = fp32: no OpenVINO), and with every worker loading its own voice
   (`workers.template` = false: spawned, not forked from the worker template).
   Piper's HTTP server on the same voice after one request, for scale (the ramp compares
   the trees at the same streams).
   Whisper is not in the workers: the box's one ASR process holds it, in both trees.
2. The breakdown: a plain process set up as a worker (pinned, one thread) loads the
   worker's pieces in turn (its modules, the voice and its warm-up, one request, the VAD
   graphs), then what the ASR process holds once per box (Whisper and its warm-up
   decode), and reads its own smaps_rollup after each:
   anonymous memory is private to a process (a spawned worker adds all of it, one forked
   from the template only what it writes), file pages are shared through the page cache
   (each of N processes is charged 1/N).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tools.bench.report import Report

REPO = Path(__file__).resolve().parents[2]
TEXT = "Thank you for calling, how can I help you today?"
LONG = ("I can see that the replacement router was shipped on Monday and should arrive by "
        "Thursday afternoon, and once it is plugged in the technician will call you to check "
        "that the line is stable and that your internet connection no longer drops.")
"""About 14 s of speech in one sentence: the longest flow window a reply here runs."""
SETTLE_S = 3.0
PER_WORKER_MB = 100.0
"""The issue's target: PSS per added inference worker."""
FIELDS = ("Pss", "Pss_Anon", "Pss_File")


def rollup_kb(pid: int | str) -> dict[str, int]:
    """The kB fields of /proc/PID/smaps_rollup ({} when the process is gone)."""
    out: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return out
    for line in text.splitlines()[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            out[name] = int(parts[0])
    return out


def _mb(kb: float) -> float:
    return round(kb / 1024.0, 1)


def _tree(pid: int) -> dict[int, dict[str, int]]:
    from tools.loadgen.stats import process_tree

    return {p: rollup_kb(p) for p in process_tree(pid)}


def _speak(url: str, text: str = TEXT) -> None:
    req = urllib.request.Request(f"{url}/v1/tts", data=json.dumps({"text": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        r.read()


def _serve_every_worker(url: str, workers: int) -> None:
    """The short and the long text, `workers` of each at once: each worker is given one
    of each (new streams go to the least loaded worker)."""
    with ThreadPoolExecutor(workers) as pool:
        for text in (TEXT, LONG):
            list(pool.map(_speak, [url] * workers, [text] * workers))


FP32 = ("tts.vocoder=\"fp32\"", "tts.flow=\"fp32\"")
"""The engine without OpenVINO (what a CPU without native bf16 runs), measured beside."""
SPAWNED = ("workers.template=false",)
"""Every worker loading its own voice (no template to fork from), measured beside."""


def _daemon(workers: int, tmp: Path, sets: tuple[str, ...] = ()) -> dict[int, dict[str, int]]:
    from tools.loadgen.peers import start_cosyvoiced

    tmp.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"workers-{workers}-", dir=tmp))

    managed, server = start_cosyvoiced(tmp, "0-1", workers, ("workers.spare=false", *sets),
                                       spare=False)
    try:
        assert server.ends.http is not None
        _serve_every_worker(server.ends.http, workers)
        time.sleep(SETTLE_S)
        tree = _tree(server.pid)
        for pid, row in tree.items():
            row["kind"] = _kind(pid, server.pid)  # type: ignore[assignment]
        return tree
    finally:
        managed.stop()


def _piper(tmp: Path) -> dict[int, dict[str, int]]:
    from tools.loadgen.peers import start_piper_http

    managed, server = start_piper_http(tmp, "0-1")
    try:
        url = server.ends.piper_http
        req = urllib.request.Request(f"{url}/synthesize", data=json.dumps({"text": TEXT}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
        time.sleep(SETTLE_S)
        return _tree(server.pid)
    finally:
        managed.stop()


def _kind(pid: int, daemon: int) -> str:
    """What a process of the daemon's tree is, for the report's rows."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return "gone"
    if "ctranslate2" in maps:
        return "ASR process"
    if b"resource_tracker" in cmdline:
        return "multiprocessing's resource tracker"
    if b"forkserver" in cmdline and ppid == daemon:
        return "worker template"
    return "worker"



def _sum(tree: dict[int, dict[str, int]], field: str) -> float:
    return _mb(sum(r.get(field, 0) for r in tree.values()))


def pieces(cache_dir: str) -> None:
    """Child side of the breakdown: print one JSON line of smaps_rollup per piece loaded."""
    from cosyvoiced.workers.worker.affinity import pin_all_threads, thread_env

    os.environ.update(thread_env(1))
    pin_all_threads([0])

    def mark(step: str) -> None:
        print(json.dumps({"step": step, **rollup_kb("self")}), flush=True)

    mark("interpreter")
    import numpy as np
    import onnxruntime  # noqa: F401

    mark("numpy, onnxruntime")
    from cosyvoiced.config.schema import AsrConfig, TtsConfig
    from cosyvoiced.listen.asr import warm_up_utterance
    from cosyvoiced.tts.engine import TtsEngine
    from cosyvoiced.workers.worker import loop  # noqa: F401 (what a worker imports)
    from cosyvoiced.workers.worker.heap import malloc_trim

    mark("worker modules")
    engine = TtsEngine(TtsConfig(cache_mb=0.0), threads=1, cache_dir=cache_dir)
    engine.voice()
    malloc_trim()
    mark("voice + warm-up")
    for _ in engine.synthesize(TEXT):
        pass
    malloc_trim()
    mark("one request")
    from cosyvoiced.listen.vad import SileroBatch

    for rate in (8000, 16000):
        batch = SileroBatch(rate, 1024, threads=1, cache_dir=cache_dir)
        slots = [batch.open() for _ in range(32)]
        batch.run(slots, np.zeros((32, batch.window), dtype=np.float32))
    malloc_trim()
    mark("VAD 8 + 16 kHz")
    from cosyvoiced.listen.asr import WhisperAsr

    asr = WhisperAsr(AsrConfig(), threads=1)
    malloc_trim()
    mark("ASR process (one per box): Whisper loaded")
    asr.transcribe([warm_up_utterance()])
    malloc_trim()
    mark("ASR process (one per box): Whisper warm-up decode")


def _breakdown(cache_dir: str) -> list[dict[str, Any]]:
    code = f"from tools.bench.memory import pieces; pieces({cache_dir!r})"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=600)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def run(quick: bool) -> Report:
    report = Report("memory", ["what", "pss_mb", "pss_anon_mb", "pss_file_mb", "processes"])
    cache_dir = str(REPO / "var" / "cache")
    prev: dict[str, int] = {}
    for row in _breakdown(cache_dir):
        delta = [_mb(row.get(f, 0) - prev.get(f, 0)) for f in FIELDS]
        report.rows.append([f"piece: {row['step']} (+)", *delta, 1])
        prev = row
    with tempfile.TemporaryDirectory() as tmp:
        _daemon(1, Path(tmp) / "fill")  # compiles what the cache lacks: not in the figures
        trees = {n: _daemon(n, Path(tmp)) for n in (1, 2)}
        fp32 = {n: _daemon(n, Path(tmp), FP32) for n in (1, 2)}
        spawned = {n: _daemon(n, Path(tmp), SPAWNED) for n in (1, 2)}
        piper = None if quick else _piper(Path(tmp))
    for n, tree in trees.items():
        report.rows.append([f"cosyvoiced, {n} worker(s)", *(_sum(tree, f) for f in FIELDS),
                            len(tree)])
        for pid, r in sorted(tree.items())[1:]:
            report.rows.append([f"  {r['kind']} pid {pid}", *(_mb(r.get(f, 0)) for f in FIELDS),
                                1])
    if piper is not None:
        report.rows.append(["piper http server", *(_sum(piper, f) for f in FIELDS), len(piper)])
        report.figures["piper_http_pss_mb"] = _sum(piper, "Pss")
    for what, runs in (("fp32 engine", fp32), ("workers spawned, not forked", spawned)):
        for n, tree in runs.items():
            report.rows.append([f"cosyvoiced {what}, {n} worker(s)",
                                *(_sum(tree, f) for f in FIELDS), len(tree)])
    added = round(_sum(trees[2], "Pss") - _sum(trees[1], "Pss"), 1)
    report.figures.update(tree_1_worker_mb=_sum(trees[1], "Pss"),
                          tree_2_workers_mb=_sum(trees[2], "Pss"), per_added_worker_mb=added,
                          per_added_worker_fp32_mb=round(_sum(fp32[2], "Pss")
                                                         - _sum(fp32[1], "Pss"), 1),
                          per_added_worker_spawned_mb=round(_sum(spawned[2], "Pss")
                                                            - _sum(spawned[1], "Pss"), 1))
    report.notes.append("a short and a long request on every worker at once, then "
                        f"{SETTLE_S:.0f} s, then PSS (Piper: the short one); "
                        "workers.spare=false, tts.cache_mb=0, CPUs 0-1; the vocoder and flow "
                        "as tts.vocoder/tts.flow = auto choose on this CPU (bf16 where it has "
                        "amx_bf16 or avx512_bf16), and both FP32 on ONNX Runtime beside")
    report.target("pss_per_added_worker_mb", added, f"<= {PER_WORKER_MB:.0f}",
                  added <= PER_WORKER_MB)
    return report
