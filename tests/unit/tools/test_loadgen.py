"""The load ramp's own logic: listener model, percentiles, schedule, knee, /proc parsing,
mix, report; and a short ramp against a fake in-process TTS server."""

from __future__ import annotations

import asyncio
import json
import math
import os

import numpy as np
import pytest


@pytest.fixture(scope="module")
def lg(repo_root):
    from tools.loadgen import ramp as loadgen_ramp
    from tools.loadgen import report as loadgen_report
    from tools.loadgen import stats as loadgen_stats
    from tools.loadgen import streams as loadgen_streams

    class NS:
        stats, ramp, report, streams = loadgen_stats, loadgen_ramp, loadgen_report, loadgen_streams

    return NS


# --- listener model -------------------------------------------------------------------


def test_listener_on_time_stream_has_no_underrun(lg):
    # 0.2 s of audio every 0.1 s: always ahead of the listener
    arrivals = [(10.05 + 0.1 * k, 0.2) for k in range(10)]
    h = lg.stats.listen(10.0, arrivals)
    assert h.ttfa_s == pytest.approx(0.05)
    assert h.audio_s == pytest.approx(2.0)
    assert h.underruns == 0 and h.stall_s == 0
    assert h.ratio == pytest.approx((0.05 + 2.0) / 2.0)


def test_listener_counts_each_gap_and_its_length(lg):
    # 1 s arrives at t=1, the next second at t=2.5 (0.5 s gap), the last at t=4 (0.5 s gap)
    h = lg.stats.listen(0.0, [(1.0, 1.0), (2.5, 1.0), (4.0, 1.0)])
    assert h.underruns == 2
    assert h.stall_s == pytest.approx(1.0)
    assert h.ratio == pytest.approx((1.0 + 1.0 + 3.0) / 3.0)


def test_listener_ignores_gaps_below_the_noise_floor(lg):
    h = lg.stats.listen(0.0, [(0.1, 0.02), (0.122, 0.02), (0.1425, 0.02)])
    assert h.underruns == 0
    h = lg.stats.listen(0.0, [(0.1, 0.02), (0.13, 0.02)])
    assert h.underruns == 1 and h.stall_s == pytest.approx(0.01)


def test_listener_jitter_buffer_absorbs_late_frames(lg):
    frames = [(1.0 + 0.02 * k + (0.04 if k == 5 else 0.0), 0.02) for k in range(10)]
    assert lg.stats.listen(0.5, frames).underruns == 1
    h = lg.stats.listen(0.5, frames, jitter_s=0.06)
    assert h.underruns == 0 and h.ttfa_s == pytest.approx(0.5)


def test_whole_wav_reply_has_latency_but_no_gap(lg):
    # Piper's server: 4 s of audio arrives in one go after 3 s of synthesis
    h = lg.stats.listen(0.0, [(3.0, 2.0), (3.001, 2.0)])
    assert h.underruns == 0
    assert h.ttfa_s == pytest.approx(3.0)
    assert h.ratio == pytest.approx(7.0 / 4.0)


def test_no_audio_is_infinitely_late(lg):
    h = lg.stats.listen(0.0, [])
    assert math.isinf(h.ttfa_s) and math.isinf(h.ratio)


def test_a_call_replys_pause_is_audio_not_a_gap(lg):
    """Sentence silence comes as all-zero frames, like comfort silence: between the reply's
    first and last speech frames they are its audio, so a reply paced at 20 ms per frame
    with a pause in it is heard with no gap; before and after the reply they are not."""
    from cosyvoiced.testing.audiosocket_peer import Received

    speech, zero = b"\x01\x00" * 160, bytes(320)
    pcm = [zero, zero, speech, speech, zero, zero, zero, speech, zero, zero]
    received = [Received(10.0 + 0.02 * i, b) for i, b in enumerate(pcm)]
    frames = lg.streams.reply_frames(received, said_s=10.01)
    assert [at for at, _ in frames] == [r.at_s for r in received[2:8]]
    heard = lg.stats.listen(10.01, frames, jitter_s=0.06)
    assert heard.underruns == 0 and heard.audio_s == pytest.approx(0.12)
    assert lg.streams.reply_frames(received, said_s=10.13) == [(received[7].at_s, 0.02)]
    assert lg.streams.reply_frames(received[:2], said_s=9.0) == []


# --- percentiles, slope -----------------------------------------------------------------


def test_percentile_matches_numpy_and_skips_nan(lg):
    xs = [float(x) for x in np.random.default_rng(1).exponential(size=101)]
    for q in (50, 95, 99):
        assert lg.stats.percentile(xs, q) == pytest.approx(np.percentile(xs, q))
    assert lg.stats.percentile([1.0, 2.0, math.nan, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert math.isnan(lg.stats.percentile([], 95))
    assert lg.stats.percentile(list(range(1, 101)), 95) == pytest.approx(95.05)


def test_slope_per_stream(lg):
    assert lg.stats.slope_per_stream([2, 4, 6], [100.0, 101.0, 102.0]) == pytest.approx(0.5)
    assert lg.stats.slope_per_stream([2, 4, 6], [100.0, math.nan, 104.0]) == pytest.approx(1.0)
    assert math.isnan(lg.stats.slope_per_stream([2, 2], [1.0, 5.0]))


# --- schedule and knee ------------------------------------------------------------------


def test_default_schedule_is_plus_ten_every_thirty_seconds(lg):
    full = lg.stats.PROFILES["full"]
    assert (full.start, full.step, full.interval_s) == (10, 10, 30.0)
    assert full.schedule()[:3] == [(0.0, 10), (30.0, 20), (60.0, 30)]


def test_schedule_stops_at_max_steps_and_max_streams(lg):
    p = lg.stats.Profile(start=3, step=5, interval_s=2.0, max_steps=10, max_streams=14,
                         after_knee=0)
    assert p.schedule() == [(0.0, 3), (2.0, 8), (4.0, 13)]
    quick = lg.stats.PROFILES["quick"]
    sched = quick.schedule()
    assert len(sched) <= 3 and sched[-1][0] + quick.interval_s <= 60


def test_knee_reasons(lg):
    S = lg.stats.StepStats
    assert lg.stats.knee_reasons(S(0, 4, replies=10, ratio_p95=1.3)) == []
    assert lg.stats.knee_reasons(S(0, 4, replies=9, ratio_p95=2.5)) == \
        ["p95 latency ratio 2.50 > 2"]
    assert lg.stats.knee_reasons(S(0, 4, replies=0)) == ["no reply finished"]
    # exactly 2x is not above it
    assert lg.stats.knee_reasons(S(0, 4, replies=3, ratio_p95=2.0)) == []
    # one rule for everyone: a gap or a refusal is not the knee by itself (the refused
    # requests are in the ratio), but it fails the stricter bar
    quiet = S(0, 4, replies=9, ratio_p95=1.0, ttfa_p95_ms=300.0)
    assert lg.stats.strict_reasons(quiet) == []
    gap = S(0, 4, replies=9, ratio_p95=1.0, ttfa_p95_ms=300.0, underruns=1)
    refused = S(0, 4, replies=9, ratio_p95=math.inf, ttfa_p95_ms=300.0, refused=2)
    slow = S(0, 4, replies=9, ratio_p95=1.5, ttfa_p95_ms=1200.0)
    assert lg.stats.knee_reasons(gap) == [] and lg.stats.strict_reasons(gap) == ["1 underruns"]
    assert lg.stats.knee_reasons(refused) == ["p95 latency ratio inf > 2 (2 refused, 0 failed)"]
    assert "2 refusals" in lg.stats.strict_reasons(refused)
    assert lg.stats.knee_reasons(slow) == []
    assert lg.stats.strict_reasons(slow) == ["first audio p95 1200 ms > 1000"]


def test_refused_requests_count_as_never_heard(lg):
    ratio = lg.stats.ratio_p95
    assert ratio([1.0] * 19, 1) == pytest.approx(1.0)  # 5% failed: p95 still heard
    assert math.isinf(ratio([1.0] * 9, 1))  # 10% failed: past any bound
    assert math.isinf(ratio([], 3)) and math.isnan(ratio([], 0))
    assert ratio([1.0, 3.0], 0) == 3.0 and ratio([1.0] * 19 + [3.0], 0) == 1.0


def _track(lg, outcomes: str, confirm: int, after_knee: int, steps: int = 10):
    """Feed a KneeTracker steps ("." clean, "x" failing) until it is done."""
    prof = lg.stats.Profile(start=2, step=2, interval_s=1.0, max_steps=steps, max_streams=100,
                            after_knee=after_knee, confirm=confirm)
    k = lg.stats.KneeTracker(prof)
    fed = ""
    for o in outcomes:
        if k.done:
            break
        k.update(["1 underruns"] if o == "x" else [])
        fed += o
    return k, fed


def test_knee_at_the_first_failing_step_then_after_knee_steps(lg):
    k, fed = _track(lg, "..x.x.....", confirm=1, after_knee=1)
    assert (k.knee_step, k.held_knee_step, fed) == (2, 2, "..x.")
    k, fed = _track(lg, "..x.x.....", confirm=1, after_knee=0)
    assert (k.knee_step, fed, k.knee_reasons) == (2, "..x", ["1 underruns"])


def test_held_knee_needs_failing_steps_in_a_row(lg):
    # a lone failing step (a blip) does not end the ramp; two in a row do
    k, fed = _track(lg, ".x..xx.x..", confirm=2, after_knee=1)
    assert (k.knee_step, k.held_knee_step, fed) == (1, 4, ".x..xx.")
    k, fed = _track(lg, ".x..xxx...", confirm=2, after_knee=0)
    assert (k.held_knee_step, fed) == (4, ".x..xx")


def test_clean_ramp_ends_with_its_schedule(lg):
    k, fed = _track(lg, "..........", confirm=2, after_knee=1, steps=5)
    assert (k.knee_step, k.held_knee_step, fed) == (None, None, ".....")
    assert k.done


def test_sustained_and_underruns_past_the_knee(lg):
    S = lg.stats.StepStats
    prof = lg.stats.PROFILES["quick"]
    r = lg.ramp.RampResult("cosyvoiced", {"tts": 1}, prof,
                           steps=[S(0, 2, replies=3, ttfa_p95_ms=300.0),
                                  S(1, 4, replies=3, ttfa_p95_ms=1200.0),
                                  S(2, 6, refused=3), S(3, 8, refused=5)],
                           knee_step=2, knee_reasons=["3 refusals"])
    assert r.sustained == 4
    doc = lg.report.summarize([r], {})
    ramp = doc["ramps"][0]
    assert ramp["sustained_streams"] == 4 and ramp["sustained_streams_strict"] == 2
    assert ramp["underruns_past_knee"] == 0 and ramp["refused_past_knee"] == 8
    past = [t for t in doc["targets"] if t["name"].startswith("underruns at and past")][0]
    assert past["ok"] and "refusals from there on: 8" in past["detail"]
    # an underrun at the knee fails it, even with refusals beside it
    doc["ramps"][0]["steps"][2]["underruns"] = 1
    past = [t for t in lg.report.derive(doc)["targets"]
            if t["name"].startswith("underruns at and past")][0]
    assert not past["ok"] and past["value"] == 1
    # no knee: not shown either way
    r.knee_step = None
    assert lg.ramp.RampResult("x", {}, prof, steps=[S(0, 2), S(1, 4)]).sustained == 4
    doc = lg.report.summarize([r], {})
    assert doc["ramps"][0]["sustained_streams"] == 8
    past = [t for t in doc["targets"] if t["name"].startswith("underruns at and past")][0]
    assert not past["ok"] and past["detail"] == "no knee reached"
    r.knee_step = 0
    assert r.sustained == 0 and lg.report.summarize([r], {})["ramps"][0][
        "sustained_streams"] == 0


def test_step_stats_from_replies(lg):
    R, H = lg.streams.Reply, lg.stats.Heard
    replies = [R("tts", 0, 0, 1, H(0.1, 3.0, 0.0, 0)), R("tts", 1, 0, 1, H(0.3, 3.0, 0.5, 2)),
               R("tts", 2, 0, 1, refused=True), R("call", 3, 0, 1, H(0.2, 2.0, 0, 0),
                                                  transcript_s=[0.8, 0.9]),
               R("tts", 4, 0, 1, error="500 boom")]
    st = lg.ramp.step_stats(1, 5, replies, {"underruns": 3, "dropped_frames": 7})
    assert st.replies == 3 and st.refused == 1 and st.errors == 1
    assert st.underruns == 2 + 3 and st.dropped_frames == 7
    assert st.underruns_by_kind == {"tts": 2, "call (daemon)": 3}
    assert st.ttfa_p50_ms == pytest.approx(200.0)
    assert st.transcript_p95_ms == pytest.approx(895.0)
    # the refused and the failed request were never heard: 2 of 5
    assert math.isinf(st.ratio_p95)
    st = lg.ramp.step_stats(1, 3, replies[:2] + replies[3:4])
    assert st.ratio_p95 == pytest.approx(3.8 / 3)  # nearest rank of 3


# --- mix --------------------------------------------------------------------------------


def test_mix_parsing(lg):
    assert lg.ramp.parse_mix("tts=2,call=1") == {"tts": 2.0, "call": 1.0}
    assert lg.ramp.parse_mix("wyoming") == {"wyoming": 1.0}
    with pytest.raises(ValueError, match="unknown stream kind 'sip'"):
        lg.ramp.parse_mix("sip=1")
    with pytest.raises(ValueError, match="no stream kind"):
        lg.ramp.parse_mix("tts=0")


def test_next_kind_keeps_the_ratio_at_every_size(lg):
    mix = {"tts": 2.0, "call": 1.0, "wyoming": 1.0}
    have: list[str] = []
    for _ in range(40):
        have.append(lg.ramp.next_kind(have, mix))
        n = len(have)
        for k, w in mix.items():
            assert abs(have.count(k) - w * n / 4) <= 1
    assert have.count("tts") == 20 and have.count("call") == 10


# --- /proc ------------------------------------------------------------------------------

ROLLUP = """55d0c0000000-7ffd5b9f1000 ---p 00000000 00:00 0                  [rollup]
Rss:              123456 kB
Pss:               98765 kB
Pss_Anon:          50000 kB
Shared_Clean:      10000 kB
"""


def test_parse_pss(lg):
    assert lg.stats.parse_pss_kb(ROLLUP) == 98765
    with pytest.raises(ValueError):
        lg.stats.parse_pss_kb("Rss: 1 kB\n")


def _fake_proc(root, tree: dict[int, list[int]], pss_kb: dict[int, int],
               ticks: dict[int, tuple[int, int]]):
    for pid, children in tree.items():
        task = root / str(pid) / "task" / str(pid)
        task.mkdir(parents=True)
        (task / "children").write_text(" ".join(map(str, children)) + (" " if children else ""))
        (task / "schedstat").write_text(f"123456 {pid * 1_000_000} 42\n")
        (root / str(pid) / "smaps_rollup").write_text(ROLLUP.replace("98765", str(pss_kb[pid])))
        u, s = ticks[pid]
        fields = ["S"] + ["0"] * 10 + [str(u), str(s)] + ["0"] * 30
        (root / str(pid) / "stat").write_text(f"{pid} (cosy voiced) " + " ".join(fields))
    (root / "loadavg").write_text("3.52 2.10 1.00 3/120 999\n")
    (root / "stat").write_text("cpu  100 20 30 5000 70 5 5 10 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")


def test_process_tree_pss_and_cpu_from_fake_proc(lg, tmp_path):
    _fake_proc(tmp_path, {10: [11, 12], 11: [13], 12: [], 13: []},
               {10: 1024, 11: 2048, 12: 512, 13: 512}, {10: (100, 50), 11: (10, 0),
                                                        12: (0, 0), 13: (5, 5)})
    assert sorted(lg.stats.process_tree(10, tmp_path)) == [10, 11, 12, 13]
    assert lg.stats.process_tree(12, tmp_path) == [12]
    assert lg.stats.pss_mb([10, 11, 12, 13, 99], tmp_path) == pytest.approx(4.0)
    tick = os.sysconf("SC_CLK_TCK")
    assert lg.stats.cpu_s([10, 13, 99], tmp_path) == pytest.approx(160 / tick)
    assert lg.stats.loadavg_1m(tmp_path) == pytest.approx(3.52)
    assert lg.stats.runqueue_wait_s([10, 11, 99], tmp_path) == pytest.approx(0.021)
    # busy = user + nice + system + irq + softirq + steal (not idle, not iowait)
    assert lg.stats.machine_busy_s(tmp_path) == pytest.approx(170 / tick)


def test_pss_of_this_process_is_plausible(lg):
    mb = lg.stats.pss_mb([os.getpid()])
    assert 10 < mb < 4000


def test_parse_counters(lg):
    text = "\n".join([
        '# HELP cosyvoiced_underruns_total x',
        'cosyvoiced_underruns_total{kind="call"} 4.0',
        'cosyvoiced_underruns_total{kind="device"} 9.0',
        'cosyvoiced_dropped_frames_total{kind="call"} 2.0',
        'cosyvoiced_admissions_refused_total{reason="overloaded"} 3.0',
        'cosyvoiced_admissions_refused_total{reason="draining"} 1.0',
        'cosyvoiced_tts_late_steps_total 3.0',
        'cosyvoiced_tts_late_steps_created 1.7e9',
        'cosyvoiced_audiosocket_tick_late_seconds_bucket{le="0.01"} 90.0',
        'cosyvoiced_audiosocket_tick_late_seconds_bucket{le="0.02"} 95.0',
        'cosyvoiced_audiosocket_tick_late_seconds_bucket{le="0.05"} 99.0',
        'cosyvoiced_audiosocket_tick_late_seconds_count 100.0'])
    assert lg.ramp.parse_counters(text) == {"underruns": 4.0, "dropped_frames": 2.0,
                                            "refused": 4.0, "late_steps": 3.0,
                                            "clock_late": 5.0}


def test_the_load_generators_own_loop_lag_is_measured(lg):
    import asyncio
    import time

    async def main() -> tuple[float, float]:
        lag = lg.stats.LoopLag()
        lag.ensure_running()
        await asyncio.sleep(0.05)
        lag.take()
        time.sleep(0.08)  # the loop held: the timer runs at least ~70 ms late
        await asyncio.sleep(0.03)
        return lag.take(), lag.take()

    held, after = asyncio.run(main())
    assert held >= 0.06 and after < held


def test_wav_format(lg):
    import io
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(22050)
        w.writeframes(bytes(100))
    assert lg.streams._wav_format(buf.getvalue()[:44]) == (22050, 16)
    with pytest.raises(ValueError):
        lg.streams._wav_format(b"not a wav" * 10)


# --- report -----------------------------------------------------------------------------


def _results(lg):
    S = lg.stats.StepStats
    prof = lg.stats.PROFILES["quick"]

    def steps(pss, refused_at=None, ratio=1.1):
        return [S(i, 2 * (i + 1), replies=5, ttfa_p50_ms=100.0, ttfa_p95_ms=200.0 * (i + 1),
                  ttfa_p99_ms=250.0 * (i + 1), ratio_p95=ratio, cpu_pct=30.0 * (i + 1),
                  pss_mb=p, worker_busy=[0.1, 0.2], loadavg_1m=2.0,
                  refused=2 if refused_at == i else 0) for i, p in enumerate(pss)]

    ours = lg.ramp.RampResult("cosyvoiced", {"tts": 1.0}, prof,
                              steps=steps([1000.0, 1000.6, 1001.2, 1001.4], refused_at=3),
                              knee_step=3, knee_reasons=["2 refusals"], held_knee_step=3)
    piper = lg.ramp.RampResult("piper-http", {"piper": 1.0}, prof,
                               steps=steps([300.0, 310.0], ratio=2.5)[:1]
                               + [S(1, 4, replies=3, ratio_p95=2.6, pss_mb=320.0)],
                               knee_step=1, knee_reasons=["p95 latency ratio 2.60 > 2"],
                               held_knee_step=1)
    return ours, piper


def test_summary_targets_and_markdown(lg):
    ours, piper = _results(lg)
    piper.steps[0].ratio_p95 = 1.5
    meta = {"date": "2026-11-30 01:00 UTC", "machine": lg.report.machine(),
            "loadavg_before": 1.5, "command": "python -m tools.loadgen --quick",
            "profile_name": "quick", "profile": {"start": 2, "step": 2, "interval_s": 10.0},
            "cpus": "0-1"}
    doc = lg.report.summarize([ours, piper], meta)
    json.dumps(doc, allow_nan=False)
    t = {x["name"].split(",")[0].split(" (")[0]: x for x in doc["targets"]}
    ratio = t["cosyvoiced / piper-http"]
    assert ratio["detail"] == "6 vs 2" and ratio["value"] == pytest.approx(6 / 2)
    assert ratio["ok"] and ratio["goal"] == (">= 2" if meta["machine"]["amx_bf16"] else ">= 1.5")
    # the stricter bar: ours stops before its refusals at 8, Piper's at its knee
    strict = t["cosyvoiced / the better peer"]
    assert strict["detail"] == "6 vs 2 (piper-http)" and strict["ok"]
    # fitted up to the knee step, included
    assert t["PSS growth per added stream"]["value"] == pytest.approx(
        np.polyfit([2, 4, 6, 8], [1000.0, 1000.6, 1001.2, 1001.4], 1)[0], abs=1e-4)
    assert t["underruns at and past the knee"]["ok"]
    md = lg.report.markdown(doc, "loadgen")
    assert "**6 concurrent real-time TTS streams on cosyvoiced vs 2 for piper-http" in md
    assert "| cosyvoiced | tts=1 | 8 **knee** **held** |" in md
    assert "At 4 streams, the largest step every server ran" in md
    assert "cosyvoiced 400 ms / 1.10 / 0; piper-http – ms / 2.60 / 0." in md
    assert "![latency](loadgen/latency.png)" in md
    assert "2 refusals" in md


def test_plots_are_written(lg, tmp_path):
    ours, piper = _results(lg)
    doc = lg.report.summarize([ours, piper], {"date": "d", "machine": {}, "cpus": "0-1"})
    paths = lg.report.plots(doc, tmp_path)
    assert [p.name for p in paths] == list(lg.report.PLOTS)
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size < 200_000


def test_docs_section_replaced_between_markers_only(lg, tmp_path):
    page = tmp_path / "performance.md"
    page.write_text("# x\n\nbefore\n<!-- loadgen:begin -->\nold\n<!-- loadgen:end -->\nafter\n")
    lg.report.update_docs(page, "new table\n")
    assert page.read_text() == ("# x\n\nbefore\n<!-- loadgen:begin -->\nnew table\n"
                                "<!-- loadgen:end -->\nafter\n")
    page.write_text("no markers\n")
    with pytest.raises(ValueError, match="markers"):
        lg.report.update_docs(page, "x")


def test_a_cpu_familys_first_run_gets_its_own_section_after_its_kin(lg, tmp_path):
    page = tmp_path / "history.md"
    page.write_text("<!-- loadgen-tts:amx:begin -->\nxeon\n<!-- loadgen-tts:amx:end -->\n"
                    "<!-- loadgen:amx:begin -->\nmix\n<!-- loadgen:amx:end -->\nafter\n")
    lg.report.update_docs(page, "epyc\n", "loadgen-tts:avx512_bf16", kin="loadgen-tts")
    lg.report.update_docs(page, "epyc again\n", "loadgen-tts:avx512_bf16", kin="loadgen-tts")
    assert page.read_text() == (
        "<!-- loadgen-tts:amx:begin -->\nxeon\n<!-- loadgen-tts:amx:end -->\n\n"
        "<!-- loadgen-tts:avx512_bf16:begin -->\nepyc again\n<!-- loadgen-tts:avx512_bf16:end -->\n"
        "<!-- loadgen:amx:begin -->\nmix\n<!-- loadgen:amx:end -->\nafter\n")
    with pytest.raises(ValueError, match="loadgen-script:amx"):
        lg.report.update_docs(page, "x", "loadgen-script:amx", kin="loadgen-script")


def test_docs_flag_targets_the_history_page_and_the_current_pages_rows(lg, repo_root):
    from tools.loadgen import cli

    from tests.unit.test_docs import anchors

    assert cli.parse_args(["--url", "http://x", "--docs"]).docs
    history = repo_root / "docs" / cli.HISTORY
    text = history.read_text()
    current = (repo_root / "docs" / cli.CURRENT).read_text()
    assert "<!-- loadgen" not in (repo_root / "README.md").read_text()
    # each kind of run has its own section per CPU family, under the heading its row links
    # to, and a row per CPU family on the current page: make bench publishes all three
    for kind, (label, anchor) in cli.SECTIONS.items():
        name = f"loadgen-{kind}" if kind else "loadgen"
        begin, end = lg.report.markers(f"{name}:avx512_bf16")
        assert text.index(begin) < text.index(end)
        assert begin not in current
        assert anchor in anchors(history)
        heading = text[:text.index(begin)].rsplit("\n#", 1)[1]
        assert anchor in anchors_of(heading), (name, heading)
        assert f"| {lg.report.row_marker(name, 'avx512_bf16')} {label} |" in current


def anchors_of(heading_line: str) -> set[str]:
    """The anchor of one heading line ("## Load ramp")."""
    from tests.unit.test_docs import slug

    return {slug(heading_line.lstrip("#").split("\n", 1)[0])}


def _docs(lg, amx: bool) -> list[dict]:
    """A run of each kind (TTS only, a mix, the script), as `--docs` publishes them."""
    import dataclasses

    ours, piper = _results(lg)
    machine = {"cpu": "Intel(R) Xeon(R) Processor", "nproc": 2, "avx512_vnni": True, "amx_bf16": amx,
               "avx512_bf16": True, "python": "3.11.7",
               "flags": ["amx_bf16", "avx512_bf16"] if amx else ["avx512_bf16"]}
    meta = {"date": "2026-12-06 01:00 UTC", "commit": "abc1234", "machine": machine,
            "loadavg_before": 1.5, "command": "python -m tools.loadgen --quick",
            "profile_name": "quick", "profile": {"start": 2, "step": 2, "interval_s": 10.0},
            "cpus": "0-1"}
    mix = dataclasses.replace(ours, mix={"tts": 2.0, "call": 1.0})
    return [lg.report.summarize([ours, piper], meta),
            lg.report.summarize([mix, ours, piper], meta),
            lg.report.summarize([ours, piper], {**meta, "text": "script"})]


def test_a_run_becomes_one_row_of_the_latest_figures(lg):
    tts, mix, script = _docs(lg, amx=False)
    cells = lg.report.row(tts, "TTS-only ramp", "performance-history.md#tts-only-ramp")
    assert cells == [
        "TTS-only ramp", "Intel Xeon (avx512_bf16, no AMX)",
        "[2026-12-06 01:00 UTC, abc1234](performance-history.md#tts-only-ramp)",
        "cosyvoiced 6 (strict 6)", "piper-http 2 (strict 0)",
        "vs piper-http 3.00 (>= 1.5) ok; strict ∞ (>= 3) ok; PSS/stream 0.24 (<= 0.5) ok; "
        "underruns past the knee 0.00 (0, knee reached) ok"]
    assert lg.report.row(script, "s", "x.md#s")[5].startswith("vs piper-http 3.00 (>= 3) ok")
    assert all("|" not in c and "\n" not in c for c in cells)
    cells = lg.report.row(mix, "mixed ramp", "x.md#mixed-load")
    assert cells[3] == "the mix tts=2,call=1 6 (strict 6); cosyvoiced 6 (strict 6)"
    assert "underruns past the knee (tts=2,call=1) 0.00 (0, knee reached) ok" in cells[5]
    assert lg.report.cpu_family({"amx_bf16": True, "avx512_vnni": True}) == "amx"
    assert lg.report.cpu_family({"avx512_vnni": True}) == "other"  # saved before flags were
    assert lg.report.cpu_family(lg.report.machine()) in ("amx", "avx512_bf16", "other")


def test_a_row_is_replaced_per_cpu_family_or_added_after_its_kind(lg, tmp_path):
    page = tmp_path / "performance.md"
    page.write_text("| a | b |\n|---|---|\n| <!-- loadgen-tts:avx512_bf16 --> old | x |\n"
                    "| <!-- loadgen:avx512_bf16 --> mix | y |\n\nafter\n")
    lg.report.update_row(page, "loadgen-tts", "avx512_bf16", ["new", "z"])
    lg.report.update_row(page, "loadgen-tts", "amx", ["amx", "w"])
    lg.report.update_row(page, "loadgen-tts", "amx", ["amx again", "v"])
    assert page.read_text() == (
        "| a | b |\n|---|---|\n| <!-- loadgen-tts:avx512_bf16 --> new | z |\n"
        "| <!-- loadgen-tts:amx --> amx again | v |\n"
        "| <!-- loadgen:avx512_bf16 --> mix | y |\n\nafter\n")
    with pytest.raises(ValueError, match="loadgen-script"):
        lg.report.update_row(page, "loadgen-script", "amx", ["x", "y"])


def test_docs_runs_keep_the_current_page_short_and_its_links_whole(lg, repo_root, tmp_path):
    """Every kind of ramp published on the AMX family, then again on it: the current page
    gains a row per kind it had none of, never a run's table, and stays within its limit
    with all three; every link of both pages still resolves."""
    import shutil

    from tools.loadgen import cli

    from tests.unit.test_docs import PERFORMANCE_MAX_BYTES, broken_links

    docs = tmp_path / "docs"
    shutil.copytree(repo_root / "docs", docs)
    before = (docs / cli.CURRENT).read_text()
    new = sum(f"<!-- {k}:amx -->" not in before for k in ("loadgen-tts", "loadgen",
                                                          "loadgen-script"))
    for _ in range(2):
        for doc in _docs(lg, amx=True):
            cli.publish_docs(doc, docs)
            plots = docs / cli.plots_dir(cli.section(doc), "amx")  # as `publish` copies them
            plots.mkdir(parents=True, exist_ok=True)
            for name in lg.report.PLOTS:
                (plots / name).write_bytes(b"\x89PNG")
    current = (docs / cli.CURRENT).read_text()
    assert len(current.encode()) <= PERFORMANCE_MAX_BYTES
    assert len(current.splitlines()) == len(before.splitlines()) + new
    assert current.count("<!-- loadgen") == before.count("<!-- loadgen") + new
    assert "Intel Xeon (amx_bf16 avx512_bf16)" in current  # its model name, shortened
    history = (docs / cli.HISTORY).read_text()
    assert history.count("Measured 2026-12-06 01:00 UTC") == 3
    assert "![latency](loadgen/tts/amx/latency.png)" in history
    assert "![latency](loadgen/script/amx/latency.png)" in history
    for amd in ("2026-12-05 00:20", "2026-12-05 00:50", "2026-12-05 01:28"):  # kept whole
        assert history.count(f"Measured {amd} UTC on AMD EPYC") == 1
    assert broken_links([docs / cli.CURRENT, docs / cli.HISTORY], tmp_path) == []


def test_a_run_goes_to_the_section_of_its_kind(lg):
    from tools.loadgen.cli import section

    def doc(*mixes: dict[str, float], **kw: str) -> dict:
        """A run's JSON as `report.derive` makes it (a ramp's mix: kind -> weight)."""
        ramps = [{"server": s, "mix": m} for s, m in zip(
            ("cosyvoiced", "cosyvoiced-noadmit", "piper-http"), mixes, strict=False)]
        return {"ramps": ramps, **kw}

    assert section(doc({"tts": 1.0}, {"tts": 1.0}, {"piper": 1.0})) == "tts"
    assert section(doc({"tts": 2.0, "call": 1.0, "wyoming": 1.0}, {"tts": 1.0})) == ""
    assert section(doc({"tts": 1.0}, text="script")) == "script"


# --- a short ramp against a fake server -------------------------------------------------


def test_ramp_steps_and_refusal_knee_against_a_fake_tts_server(lg, monkeypatch):
    """A fake /v1/tts that streams 0.45 s of audio in 3 pieces over 0.3 s and refuses a
    4th concurrent request: the ramp adds 2 streams per step and stops at the refusals."""
    from aiohttp import web

    active = {"n": 0, "max": 0}

    async def tts(request: web.Request) -> web.StreamResponse:
        if active["n"] >= 4:
            return web.json_response({"error": {"code": "overloaded"}}, status=503)
        active["n"] += 1
        active["max"] = max(active["max"], active["n"])
        try:
            r = web.StreamResponse(headers={"X-Sample-Rate": "8000"})
            await r.prepare(request)
            for _ in range(3):
                await r.write(bytes(2400))  # 0.15 s
                await asyncio.sleep(0.1)
            await r.write_eof()
            return r
        finally:
            active["n"] -= 1

    async def main():
        app = web.Application()
        app.router.add_post("/v1/tts", tts)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        server = lg.ramp.Server("fake", os.getpid(),
                                lg.streams.Endpoints(http=f"http://127.0.0.1:{port}"))
        prof = lg.stats.Profile(start=1, step=2, interval_s=1.2, max_steps=5, max_streams=50,
                                after_knee=1)
        try:
            return await lg.ramp.ramp(server, {"tts": 1.0}, prof, log=lambda _m: None)
        finally:
            await runner.cleanup()

    # only refusals make the knee here: a loaded test machine may also delay a piece
    monkeypatch.setattr(lg.ramp, "knee_reasons",
                        lambda st: [f"{st.refused} refusals"] if st.refused else [])
    r = asyncio.run(main())
    # the knee comes once streams often overlap by 4 (at 5 or 7 streams), and the ramp
    # runs exactly one step past it
    assert r.knee_step in (2, 3) and any("refusals" in x for x in r.knee_reasons)
    assert [s.streams for s in r.steps] == [1, 3, 5, 7, 9][:r.knee_step + 2]
    assert r.sustained == r.steps[r.knee_step - 1].streams
    assert r.steps[0].refused == 0 and r.steps[-1].refused > 0
    first = r.steps[0]
    assert first.replies >= 2 and first.ratio_p95 < 3.0
    assert 0 < first.ttfa_p50_ms < 500
    assert first.pss_mb > 10 and first.cpu_pct >= 0


def test_servers_take_turns_and_never_overlap(lg, monkeypatch):
    """in_turns: A's step, B's step, A's step, ...; no request reaches one server while the
    other has its turn (the paused ramp's requests in flight finish first)."""
    from aiohttp import web

    starts: dict[str, list[float]] = {"a": [], "b": []}
    ends: dict[str, list[float]] = {"a": [], "b": []}

    def handler(name: str):
        async def tts(request: web.Request) -> web.StreamResponse:
            starts[name].append(asyncio.get_running_loop().time())
            r = web.StreamResponse(headers={"X-Sample-Rate": "8000"})
            await r.prepare(request)
            for _ in range(3):
                await r.write(bytes(2400))
                await asyncio.sleep(0.1)
            await r.write_eof()
            ends[name].append(asyncio.get_running_loop().time())
            return r
        return tts

    async def main():
        runners, servers = [], []
        for name in ("a", "b"):
            app = web.Application()
            app.router.add_post("/v1/tts", handler(name))
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            port = site._server.sockets[0].getsockname()[1]
            servers.append(lg.ramp.Server(name, os.getpid(), lg.streams.Endpoints(
                http=f"http://127.0.0.1:{port}")))
        prof = lg.stats.Profile(start=1, step=1, interval_s=0.8, max_steps=3, max_streams=9,
                                after_knee=0)
        order: list[tuple[str, float]] = []
        loop = asyncio.get_running_loop()
        step = lg.ramp.ServerRamp.step

        async def timed_step(self):
            order.append((self.server.name, loop.time()))  # when its turn begins
            return await step(self)

        monkeypatch.setattr(lg.ramp.ServerRamp, "step", timed_step)
        try:
            res = await lg.ramp.in_turns([(s, {"tts": 1.0}) for s in servers], prof,
                                         log=lambda _m: None)
        finally:
            for r in runners:
                await r.cleanup()
        return res, order

    monkeypatch.setattr(lg.ramp, "knee_reasons", lambda st: [])  # every step runs
    (ra, rb), order = asyncio.run(main())
    assert [n for n, _ in order] == ["a", "b", "a", "b", "a", "b"]
    assert [s.streams for s in ra.steps] == [1, 2, 3] == [s.streams for s in rb.steps]
    # every request to a server began and ended inside that server's own turns
    # a turn: from its step's start to the next server's step (its requests in flight
    # drain before that); the warm-up requests come before the first step
    turns = {"a": [], "b": []}
    for k, (name, t0) in enumerate(order):
        turns[name].append((t0, order[k + 1][1] if k + 1 < len(order) else math.inf))
    first = order[0][1]
    for name in ("a", "b"):
        assert len([t for t in starts[name] if t > first]) >= 6
        for t in starts[name] + ends[name]:
            if t > first:
                assert any(lo - 0.02 <= t <= hi + 0.02 for lo, hi in turns[name]), \
                    (name, t, turns)


def test_idle_calls_slope_is_fitted_past_the_first_calls(lg):
    doc = {"ramps": [], "idle_calls": {"calls": [0, 15, 30, 45, 60],
                                       "pss_mb": [861.0, 965.9, 967.1, 968.7, 970.0]}}
    lg.report.derive(doc)
    assert doc["idle_calls"]["mb_per_call"] == pytest.approx(
        np.polyfit([30, 45, 60], [967.1, 968.7, 970.0], 1)[0], abs=1e-4)
    t = doc["targets"][0]
    assert t["ok"] and "30 to 60" in t["name"] and "0 calls 861 MB" in t["detail"]


def test_the_script_mix_repeats_its_prompts_and_varies_its_values(lg):
    import random

    rng = random.Random(3)
    texts = [lg.streams.script_text(rng) for _ in range(200)]
    # each reply opens with a fixed prompt, and goes on with a value of its own
    assert all(any(t.startswith(p) for p in lg.streams.SCRIPT_PROMPTS) for t in texts)
    assert len(set(texts)) > 150
    ours, piper = _results(lg)
    doc = lg.report.summarize([ours, piper], {"machine": {}, "text": "script"})
    same = [t for t in doc["targets"] if t["name"].startswith("cosyvoiced / piper-http")][0]
    assert same["goal"] == ">= 3" and same["ok"]  # 6 vs 2


def test_daemon_settings_from_the_command_line(repo_root):
    from tools.loadgen import cli

    args = cli.parse_args(["--start-daemon", "--text", "script", "--set", "asr.enabled=false",
                           "--set", "workers.spare=false"])
    assert cli.daemon_sets(args) == (*cli.SCRIPT_CACHE, "asr.enabled=false", "workers.spare=false")
    assert not cli.has_spare(args)
    plain = cli.parse_args(["--start-daemon"])
    assert cli.daemon_sets(plain) == () and cli.has_spare(plain)
    assert not cli.has_spare(cli.parse_args(["--start-daemon", "--set", "workers.spare = false"]))


def test_the_load_generator_measures_ahead_of_the_servers_nice_and_returns_to_it():
    import argparse
    import os

    from tools.loadgen import cli

    async def mine() -> int:
        return os.getpriority(os.PRIO_PROCESS, 0)

    before = os.getpriority(os.PRIO_PROCESS, 0)
    root = os.geteuid() == 0  # a lower nice needs CAP_SYS_NICE (CI runs as root)
    inside = cli.measure(argparse.Namespace(nice=before), mine())
    assert inside == (before - cli.AHEAD if root else before)
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    assert cli.measure(argparse.Namespace(nice=None), mine()) == before


def test_no_amx_is_refused_with_docs_and_recorded_in_the_machine(monkeypatch):
    from tools.loadgen import cli, report
    from tools.quantize.noamx import ENV

    with pytest.raises(SystemExit):
        cli.parse_args(["--start-daemon", "--no-amx", "--docs"])
    assert cli.parse_args(["--start-daemon", "--no-amx"]).no_amx
    monkeypatch.setenv(ENV, "1")
    assert report.machine()["amx_withheld"] is True
    monkeypatch.delenv(ENV)
    assert report.machine()["amx_withheld"] is False
