"""Suite `download`: a long reply downloaded from an idle daemon at once (a client saving
a file), against the engine's own synthesis of the same text in the same run.

The engine's time is `TtsEngine.synthesize` in this process at one thread (as a worker
runs it), median of the rounds; the download is `POST /v1/tts` from the first byte sent
to the last received, with `workers.work_conserving` on (the default) and off (every
stream paced to `workers.lookahead_s` ahead of real time), interleaved rounds.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from tools.bench.calls import Daemon
from tools.bench.report import Report
from tools.bench.tts import TEXTS

TARGET = 1.2
"""Download time / engine time on an idle daemon (issue: work-conserving scheduling)."""


def _download(http: str, text: str) -> tuple[float, float]:
    """(seconds, audio seconds) of one reply at 16 kHz s16le."""
    import json

    req = urllib.request.Request(f"{http}/v1/tts", data=json.dumps(
        {"text": text, "format": "s16le", "rate_hz": 16000}).encode(),
        headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        data = r.read()
    return time.monotonic() - t0, len(data) / 2 / 16000


def run(quick: bool) -> Report:
    from cosyvoiced.config.schema import TtsConfig
    from cosyvoiced.runtime.log import setup_logging
    from cosyvoiced.tts.engine import TtsEngine
    from cosyvoiced.tts.request import SynthesisOptions

    setup_logging("warning", sink="json")
    text = TEXTS["long"]
    rounds = 1 if quick else 3
    report = Report("download", ["what", "seconds", "audio_s", "vs_engine"])
    # the same text every round: no prompt cache on either side (the engine is measured)
    engine = TtsEngine(TtsConfig(cache_mb=0), threads=1,
                       cache_dir=tempfile.mkdtemp(prefix="bench-dl-"))
    engine.preload()
    opts = SynthesisOptions(rate_hz=16000, format="s16le")
    settings = [True] if quick else [True, False]
    times: dict[str, list[float]] = {"engine": []}
    audio: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-dl-") as tmp:
        daemons = {}
        for wc in settings:
            home = Path(tmp) / f"wc{int(wc)}"
            home.mkdir()
            daemons[wc] = Daemon(home, (f"workers.work_conserving={str(wc).lower()}",
                                        "tts.cache_mb=0"))
        try:
            for d in daemons.values():
                _download(d.http, "Warming up.")
            for _ in range(rounds):
                t0 = time.perf_counter()
                chunks = list(engine.synthesize(text, opts))
                times["engine"].append(time.perf_counter() - t0)
                audio["engine"] = sum(c.duration_s for c in chunks)
                for wc, d in daemons.items():
                    key = "download, work-conserving" if wc else "download, paced"
                    took, audio[key] = _download(d.http, text)
                    times.setdefault(key, []).append(took)
        finally:
            for d in daemons.values():
                d.stop()
    engine_s = statistics.median(times["engine"])
    for key, ts in times.items():
        med = statistics.median(ts)
        report.rows.append([key, round(med, 2), round(audio[key], 2), round(med / engine_s, 3)])
        report.figures[key] = {"seconds": med, "audio_s": audio[key]}
    ratio = statistics.median(times["download, work-conserving"]) / engine_s
    report.target("download_vs_engine (idle daemon, work-conserving)", ratio,
                  f"<= {TARGET}", ratio <= TARGET)
    report.notes.append(f"median of {rounds} interleaved rounds; text: the tts suite's long "
                        "text; engine at one thread in this process, the daemon's dev config")
    return report
