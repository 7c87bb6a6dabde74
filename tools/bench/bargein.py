"""Suite `bargein`: what a caller heard of a say, against what the caller got.

The real daemon says a long reply into an AudioSocket call; the peer, a real recorded
caller, starts talking over it at a known instant (its speech onset 0.6 s into the reply
as heard, then 0.2 s later each trial), and the daemon cuts the reply (VAD barge-in) and
publishes its `playback_done` with the words the caller heard. Comfort silence is off, so
every frame the peer gets is the reply's: the audio the peer actually received up to the
barge-in is the reference.

Per trial: the daemon's `heard_s` against the seconds the peer got; its words against
the words in that audio, two ways: (1) on the say's own timeline, every reported word
starts before the end of the audio the peer got (a whole one also ends by then), and the
audio counted sent is the audio received (within a frame), so no word starting before
that end is missing; (2) Whisper (the daemon's own `/v1/audio/transcriptions`, tiny.en,
word times) on the audio the peer got: its words starting before the end of that audio,
which must number the reported words within one (the cut word may go either way). A
trial matches when both hold. Target: every trial.
"""

from __future__ import annotations

import asyncio
import io
import re
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

from cosyvoiced.testing.audiosocket_peer import Peer
from cosyvoiced.testing.events import follow_events
from cosyvoiced.testing.prompts import prompts
from tools.bench.calls import Daemon, _onset_s
from tools.bench.report import Report, cpu_flags

REPLY = ("Thank you for calling the support line. Please listen carefully, as our menu "
         "options have changed. For billing, press one. For technical support, press two. "
         "For everything else, stay on the line.")
TRIALS = 20
FIRST_ONSET_S = 0.6
STEP_S = 0.2
FRAME_SLACK_S = 0.021
"""The daemon's count and the peer's may differ by a short last frame (padded)."""


def _bare(words: list[str]) -> list[str]:
    out = [re.sub(r"[^\w']", "", w).lower() for w in words]
    return [w for w in out if w]


async def _trial(d: Daemon, events: list, caller: np.ndarray, onset_at_s: float
                 ) -> tuple[dict, np.ndarray]:
    """One call: the reply, the caller's speech onset `onset_at_s` into it as the peer
    hears it; (the reply's playback_done, the reply's audio the peer got)."""
    from aiohttp import ClientSession, ClientTimeout

    peer = Peer(d.host, d.port)
    await peer.connect()
    cid = str(peer.call.call_id)
    silence = asyncio.create_task(peer.play(np.zeros(8000 * 60, dtype=np.int16)))
    await asyncio.sleep(0.3)
    async with ClientSession(timeout=ClientTimeout(total=30)) as s, \
            s.post(f"{d.http}/v1/calls/{cid}/say", json={"text": REPLY}) as r:
        say_id = (await r.json())["id"]
    deadline = time.monotonic() + 30
    while not peer.call.received:
        assert time.monotonic() < deadline, "the reply never reached the peer"
        await asyncio.sleep(0.002)
    first = peer.call.received[0].at_s
    onset = _onset_s(caller.astype(np.float32) / 32768)
    await asyncio.sleep(max(0.0, first + onset_at_s - onset - time.monotonic()))
    silence.cancel()
    await peer.play(np.concatenate([caller, np.zeros(4000, dtype=np.int16)]))
    while not (done := [e for e in events if e["type"] == "playback_done"
                        and e.get("say_id") == say_id]):
        assert time.monotonic() < deadline, "no playback_done"
        await asyncio.sleep(0.02)
    await peer.hangup()
    return done[0], peer.call.received_samples()


async def _whisper(http: str, pcm: np.ndarray) -> list[dict]:
    """Whisper's words (with times) in 8 kHz `pcm`."""
    from aiohttp import ClientSession, ClientTimeout, FormData

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(pcm.astype("<i2").tobytes())
    form = FormData()
    form.add_field("file", buf.getvalue(), filename="heard.wav", content_type="audio/wav")
    form.add_field("model", "whisper-1")
    form.add_field("response_format", "verbose_json")
    form.add_field("timestamp_granularities[]", "word")
    async with ClientSession(timeout=ClientTimeout(total=120)) as s, \
            s.post(f"{http}/v1/audio/transcriptions", data=form) as r:
        assert r.status == 200, await r.text()
        return list((await r.json()).get("words", []))


def _timeline_ok(done: dict, got_s: float) -> bool:
    words = done["words"]
    whole_ok = all(w["end"] <= got_s + FRAME_SLACK_S for w in words if not w["partial"])
    starts_ok = all(w["start"] < got_s + FRAME_SLACK_S for w in words)
    return abs(done["heard_s"] - got_s) <= FRAME_SLACK_S and whole_ok and starts_ok


def run(quick: bool) -> Report:
    caller = next((p.samples() * 32767).astype(np.int16) for p in prompts()
                  if 1.5 < p.samples().shape[0] / 8000 < 4.0)
    trials = 4 if quick else TRIALS
    report = Report("bargein", ["trial", "onset s", "heard s", "got s", "Δ ms", "cut ms",
                                "words", "timeline", "whisper", "match"])
    results: list[tuple[dict, np.ndarray, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Daemon(Path(tmp), ('audiosocket.greeting=""', "audiosocket.comfort_silence=false",
                               "audiosocket.first_frame_wait_ms=0"))
        try:
            async def main() -> list[list[dict]]:
                events: list = []
                stop = asyncio.Event()
                watcher = asyncio.create_task(follow_events(d.http, events, stop))
                await asyncio.sleep(0.3)
                for k in range(trials):
                    onset_at = FIRST_ONSET_S + STEP_S * k
                    done, pcm = await _trial(d, events, caller, onset_at)
                    results.append((done, pcm, onset_at))
                heard = [await _whisper(d.http, pcm) for _, pcm, _ in results]
                stop.set()
                watcher.cancel()
                return heard

            whispered = asyncio.run(main())
        finally:
            d.stop()
    matched, same_count, deltas, cuts = 0, 0, [], []
    for k, ((done, pcm, onset_at), ww) in enumerate(zip(results, whispered, strict=True)):
        got_s = pcm.shape[0] / 8000
        said = done["words"]
        ref = _bare([w["word"] for w in ww if w["start"] < got_s])
        timeline = _timeline_ok(done, got_s)
        count_ok = abs(len(ref) - len(_bare([w["text"] for w in said]))) <= 1
        same_count += len(ref) == len(_bare([w["text"] for w in said]))
        ok = done["reason"] == "barge_in" and timeline and count_ok
        matched += ok
        deltas.append(abs(done["heard_s"] - got_s) * 1000)
        cuts.append((done["heard_s"] - onset_at) * 1000)
        report.rows.append([k + 1, round(onset_at, 2), round(done["heard_s"], 3),
                            round(got_s, 3), round(deltas[-1], 1), round(cuts[-1]),
                            f"{len(said)}{'*' if said and said[-1]['partial'] else ''}",
                            "ok" if timeline else "no", len(ref), "yes" if ok else "NO"])
    report.figures = {"trials": trials, "matched": matched, "whisper_same_count": same_count,
                      "max_abs_heard_vs_got_ms": max(deltas),
                      "heard_equals_got": sum(x < 0.5 for x in deltas),
                      "cut_after_onset_ms_p50": float(np.percentile(cuts, 50)),
                      "cut_after_onset_ms_p95": float(np.percentile(cuts, 95)),
                      "cpu": cpu_flags()}
    report.notes.append("words: reported heard words (* the last one partial); whisper: "
                        "tiny.en's words in the audio the peer got; cut ms: reply audio "
                        "heard after the caller's speech onset (VAD's barge-in delay)")
    f = report.figures
    report.notes.append(f"matched {matched}/{trials}; heard_s = the peer's audio in "
                        f"{f['heard_equals_got']}, max |Δ| {f['max_abs_heard_vs_got_ms']:.0f} "
                        f"ms; Whisper's word count = ours in {same_count}, ±1 in the rest; "
                        f"cut after onset p50 {f['cut_after_onset_ms_p50']:.0f} ms, p95 "
                        f"{f['cut_after_onset_ms_p95']:.0f} ms")
    report.notes.append(f"CPU: {cpu_flags()}")
    report.target("trials whose heard words match the audio the peer got (within a word)",
                  matched / trials, "= 1 (every trial)", matched == trials)
    return report
