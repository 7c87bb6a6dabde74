"""Suite `tn`: English text normalization, ours against nemo_text_processing, one run.

Ours: the front end's English reader on NeMo's grammars applied with kaldifst (the
grammars built by `make install`, or here where missing). Theirs: nemo_text_processing's
`Normalizer(input_case="cased", lang="en")` on pynini (its .far cache under
var/cache/tn-nemo: built the first time, ~40 s). Both on one pinned core, on NeMo's English
TN cases (tests/data/nemo_tn_en/, all classes but normalize_with_audio) and on the
call-center sentences of tools/data/callcenter_en.txt that hold digits or symbols, each
window cache emptied first.
Rows: each class's exact-match share (scored as `cosyvoiced.testing.tn_cases` does) for
both; then ms per input (mean over the cases, a first pass: every window read afresh; wall
clock, the target, and this thread's CPU time, which a busy box does not inflate),
ms per sentence (median, window cache emptied first), and ours' load time and RSS (a
fresh process). The CPU's AMX/AVX512-BF16 flags are noted (the figures are CPU-bound).
Last, the engine's first audio and RTF with the grammars against the rules (`tncost`).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from cosyvoiced.testing.tn_cases import CALL_CENTER, Case, load_cases, matches
from cosyvoiced.tts.frontend.normalize import _LOADED, normalize_text, use_grammars
from cosyvoiced.tts.frontend.normalize.grammars import ensure
from tools.bench.report import Report, cpu_flags
from tools.bench.tncost import add_rows, measure

REPO = Path(__file__).resolve().parents[2]
SENTENCES = REPO / "tools" / "data" / "callcenter_en.txt"
NEMO_CACHE = REPO / "var" / "cache" / "tn-nemo"
LOAD_PROBE = """
import json, re, sys, time
t = time.perf_counter()
from cosyvoiced.tts.frontend.normalize import use_grammars, normalize_text
assert use_grammars(sys.argv[1])
normalize_text("Pay $5 on 12/03/2023.")
hwm = re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read())
print(json.dumps({"load_s": time.perf_counter() - t, "rss_mb": int(hwm.group(1)) / 1024}))
"""


def _score(fn: Callable[[str], str], cases: list[Case]
           ) -> tuple[dict[str, list[int]], float, float]:
    """Per class [passed, total], and the mean ms per input: wall clock, and this
    thread's CPU time (what a core spends on it, whatever else the box runs)."""
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    t = cpu = 0.0
    for case in cases:
        t0, c0 = time.perf_counter(), time.thread_time()
        got = fn(case.written)
        t += time.perf_counter() - t0
        cpu += time.thread_time() - c0
        per[case.cls][1] += 1
        per[case.cls][0] += matches(got, case)
    return per, 1000 * t / len(cases), 1000 * cpu / len(cases)


def _per_sentence(fn: Callable[[str], str], sentences: list[str]) -> float:
    times = []
    for s in sentences:
        t0 = time.perf_counter()
        fn(s)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def _share(per: dict[str, list[int]], classes: tuple[str, ...] | None = None) -> float:
    keys = [c for c in per if classes is None or c in classes]
    return sum(per[c][0] for c in keys) / max(1, sum(per[c][1] for c in keys))


def run(quick: bool) -> Report:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    cases = load_cases()
    sentences = [ln for ln in SENTENCES.read_text().splitlines() if ln and ln[0] != "#"
                 and re.search(r"[\d$%#@&/]", ln)]  # the sentences there is something to read
    if quick:
        cases, sentences = cases[::5], sentences[::4]
    directory = ensure()
    if directory is None or not use_grammars(directory):
        raise SystemExit("NeMo's English grammars are not built (make install)")

    def ours(text: str) -> str:
        return normalize_text(text)

    def clear() -> None:  # every window read afresh
        for reader in _LOADED.values():
            reader.window.__self__.clear()  # type: ignore[attr-defined]

    clear()
    ours_per, ours_ms, ours_cpu_ms = _score(ours, cases)  # the first pass: nothing read before
    clear()
    ours_sentence_ms = _per_sentence(ours, sentences)
    probe = subprocess.run([sys.executable, "-c", LOAD_PROBE, str(directory)],
                           capture_output=True, text=True, check=True, cwd=REPO)
    loaded = json.loads(probe.stdout)

    from nemo_text_processing.text_normalization.normalize import Normalizer

    NEMO_CACHE.mkdir(parents=True, exist_ok=True)
    nemo = Normalizer(input_case="cased", lang="en", cache_dir=str(NEMO_CACHE))
    nemo_per, nemo_ms, nemo_cpu_ms = _score(nemo.normalize, cases)
    nemo_sentence_ms = _per_sentence(nemo.normalize, sentences)
    use_grammars(None)

    report = Report("tn", ["class", "cases", "ours exact", "nemo exact"])
    for cls in sorted(ours_per):
        n = ours_per[cls][1]
        report.rows.append([cls, n, ours_per[cls][0] / n, nemo_per[cls][0] / n])
    cc, every = _share(ours_per, CALL_CENTER), _share(ours_per)
    report.rows.append(["call-center classes", sum(ours_per[c][1] for c in CALL_CENTER),
                        cc, _share(nemo_per, CALL_CENTER)])
    report.rows.append(["all classes", sum(v[1] for v in ours_per.values()), every,
                        _share(nemo_per)])
    report.rows.append(["ms per input (mean), first pass", len(cases), ours_ms, nemo_ms])
    report.rows.append(["CPU ms per input (mean), first pass", len(cases), ours_cpu_ms,
                        nemo_cpu_ms])
    report.rows.append(["ms per sentence with digits/symbols (median)", len(sentences),
                        ours_sentence_ms,
                        nemo_sentence_ms])
    report.figures.update(ours_ms_per_input=ours_ms,
                          nemo_ms_per_input=nemo_ms, nemo_over_ours=nemo_ms / ours_ms,
                          ours_cpu_ms_per_input=ours_cpu_ms, nemo_cpu_ms_per_input=nemo_cpu_ms,
                          ours_ms_per_sentence=ours_sentence_ms,
                          nemo_ms_per_sentence=nemo_sentence_ms, **loaded,
                          cpu=cpu_flags())
    report.notes += [cpu_flags(), "one pinned core; the window cache emptied before "
                     "each pass (ms per input: the first reading of every case)",
                     f"ms per input: nemo_text_processing / ours = {nemo_ms / ours_ms:.1f}x "
                     "(same run, same core)",
                     f"ours: load {loaded['load_s']:.2f} s, RSS {loaded['rss_mb']:.0f} MB "
                     f"(a fresh process, grammars read and one sentence said)"]
    report.target("call-center classes exact", cc, ">= 0.97", cc >= 0.97)
    report.target("all classes exact", every, ">= 0.90", every >= 0.90)
    report.target("ms per input (first pass)", ours_ms, "<= 5", ours_ms <= 5)
    report.target("ms per call-center sentence (median)", ours_sentence_ms, "<= 10",
                  ours_sentence_ms <= 10)
    report.target("grammar load s", loaded["load_s"], "< 1", loaded["load_s"] < 1)
    add_rows(report, measure(rounds=1 if quick else 3))  # what the engine pays for them
    return report

