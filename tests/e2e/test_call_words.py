"""What a caller heard of a say, on the real daemon: a real voice says a long reply into
an AudioSocket call, a real recorded caller talks over it, and the say's `playback_done`
lists the words whose audio reached the peer before the barge-in; a say that plays out
lists them all. The peer's own record of the frames it got is the reference."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import numpy as np
import pytest
from aiohttp import ClientSession, ClientTimeout

from cosyvoiced.testing.audiosocket_peer import FRAME_S, Peer, PeerCall
from cosyvoiced.testing.prompts import prompts
from tests.e2e.test_calls import LONG_GREETING, _events, _onset_s, _pcm, _ports
from tests.fixtures.daemon import DaemonProcess, SharedDaemon, wait_idle

SHORT = "Your order ships today, and it should arrive on Tuesday."


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    s = SharedDaemon(tmp_path_factory, "callwords")
    yield s
    s.close()


@pytest.fixture
def daemon(shared: SharedDaemon) -> DaemonProcess:
    d = shared.get()
    wait_idle(d)
    return d


def _bare(words: list[str]) -> list[str]:
    return [re.sub(r"[^\w']", "", w).lower() for w in words]


def said_span(call: PeerCall, after_s: float) -> tuple[float, float]:
    """(arrival time of the first speech frame after `after_s`, seconds of audio the peer
    got from it to the last speech frame): the say's audio the caller heard (a pause the
    say was cut in is not counted: it is silence)."""
    got = [r for r in call.received if r.at_s >= after_s]
    speech = [n for n, r in enumerate(got) if not r.silent]
    assert speech, "the say never reached the peer"
    return got[speech[0]].at_s, (speech[-1] - speech[0] + 1) * FRAME_S


async def _say(http: str, cid: str, text: str, **kw: object) -> str:
    async with ClientSession(timeout=ClientTimeout(total=30)) as s, \
            s.post(f"{http}/v1/calls/{cid}/say", json={"text": text, **kw}) as r:
        assert r.status == 202, await r.text()
        return str((await r.json())["id"])


async def _wait(events: list, say_id: str, kind: str, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        found = [e for _, e in events if e["type"] == kind and e.get("say_id") == say_id]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no {kind} for {say_id}"
        await asyncio.sleep(0.02)


def _check_spans(text: str, words: list[dict]) -> None:
    """Each word as written in `text`, in order, none skipped."""
    for w in words:
        assert text[w["char_start"]:w["char_end"]] == w["text"]
    assert _bare([w["text"] for w in words]) == _bare(text.split())[:len(words)]


def test_a_caller_who_cuts_in_heard_a_prefix_ending_at_the_barge_in(daemon):
    host, port, http = _ports(daemon)
    prompt = next(p for p in prompts() if 1.5 < p.samples().shape[0] / 8000 < 4.0)
    speech = _pcm(prompt.samples())
    onset = _onset_s(prompt.samples())

    async def main():
        events: list = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_events(http, events, stop))
        await asyncio.sleep(0.3)
        peer = Peer(host, port)
        await peer.connect()
        cid = str(peer.call.call_id)
        player = asyncio.create_task(peer.play(np.zeros(8000 * 30, dtype=np.int16)))
        await asyncio.sleep(0.5)
        asked = time.monotonic()
        say_id = await _say(http, cid, LONG_GREETING)
        await _wait(events, say_id, "playback_started")
        await asyncio.sleep(3.0)  # mid-sentence: the caller talks over it
        player.cancel()
        t_onset = time.monotonic() + onset
        await peer.play(np.concatenate([speech, np.zeros(4000, dtype=np.int16)]))
        done = await _wait(events, say_id, "playback_done")
        await peer.hangup()
        stop.set()
        watcher.cancel()
        return peer, asked, t_onset, done

    peer, asked, t_onset, done = asyncio.run(main())
    first_s, got_s = said_span(peer.call, asked)
    words = done["words"]
    print(f"heard {done['heard_s']:.2f} s ({len(words)} words), the peer got {got_s:.2f} s; "
          f"caller onset {t_onset - first_s:.2f} s into the say; unspoken "
          f"{len(done['unspoken'])} chars")
    assert done["reason"] == "barge_in"
    assert 3 <= len(words) < len(LONG_GREETING.split())
    _check_spans(LONG_GREETING, words)
    # the audio counted as sent is what the peer got (a pause it was cut in: silence; a
    # frame padded at an underrun on a loaded box: up to 20 ms more at the peer each)
    assert got_s - 0.1 <= done["heard_s"] <= got_s + 0.8
    for w in words:  # each heard word's audio reached the peer (the cut one: its start)
        assert (w["start"] if w["partial"] else w["end"]) <= got_s + 0.05, w
    assert not any(w["partial"] for w in words[:-1])
    # it ends near where the caller began to speak (barge-in: VAD's delay after it)
    assert -0.1 <= done["heard_s"] - (t_onset - first_s) <= 1.2
    cut = words[-1]
    rest = LONG_GREETING[cut["char_end"]:] if cut["partial"] else done["unspoken"]
    assert done["unspoken"] == rest and LONG_GREETING.endswith(rest)
    said = LONG_GREETING[:len(LONG_GREETING) - len(rest)]
    assert _bare(said.split())[:len(words)] == _bare([w["text"] for w in words])
    assert len(_bare(said.split())) <= len(words) + 1  # nothing skipped between them


def test_a_say_that_plays_out_reports_all_its_words_at_any_speed(daemon):
    host, port, http = _ports(daemon)

    async def main():
        events: list = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_events(http, events, stop))
        await asyncio.sleep(0.3)
        peer = Peer(host, port)
        await peer.connect()
        cid = str(peer.call.call_id)
        player = asyncio.create_task(peer.play(np.zeros(8000 * 30, dtype=np.int16)))
        dones, spans, on_ws = [], [], []
        async with ClientSession(timeout=ClientTimeout(total=60)) as s:
            ws = await s.ws_connect(f"{http}/v1/calls/events?call={cid}")
            assert (await ws.receive_json())["type"] == "ready"
            for speed in (1.0, 2.0):
                asked = time.monotonic()
                say_id = await _say(http, cid, SHORT, speed=speed)
                dones.append(await _wait(events, say_id, "playback_done"))
                spans.append(said_span(peer.call, asked)[1])
                while sum(e["type"] == "playback_done" for e in on_ws) < len(dones):
                    on_ws.append(await asyncio.wait_for(ws.receive_json(), 10))
            await ws.close()
        player.cancel()
        await peer.hangup()
        stop.set()
        watcher.cancel()
        return dones, spans, [e for e in on_ws if e["type"] == "playback_done"]

    dones, spans, on_ws = asyncio.run(main())
    assert on_ws == dones  # the same event on the WebSocket as on SSE
    for done, got_s in zip(dones, spans, strict=True):
        print(f"heard {done['heard_s']:.2f} s, the peer got {got_s:.2f} s, "
              f"{len(done['words'])} words")
        assert done["reason"] == "done" and done["unspoken"] == ""
        assert len(done["words"]) == len(SHORT.split())
        _check_spans(SHORT, done["words"])
        assert not any(w["partial"] for w in done["words"])
        assert got_s - 0.1 <= done["heard_s"] <= got_s + 0.5  # the tail: silence
        assert done["words"][-1]["end"] <= done["heard_s"]
    assert dones[1]["heard_s"] < 0.7 * dones[0]["heard_s"]  # twice as fast


def test_a_repeated_prompt_comes_from_the_cache_with_its_word_times(tmp_path):
    """Calls say the same prompts all day: a sentence synthesized with word timing is kept
    with its words' times, and the same sentence in another request, at other offsets of
    its input, is copied from the cache with its words mapped to that input."""
    from cosyvoiced.config.schema import TtsConfig
    from cosyvoiced.tts.engine import TtsEngine
    from cosyvoiced.tts.request import SynthesisOptions

    engine = TtsEngine(TtsConfig(precision="fp32", vocoder="fp32", flow="fp32", cache_mb=8),
                       cache_dir=str(tmp_path))
    prompt = "Thank you for calling."

    def say(text: str, words: bool = True) -> list:
        return list(engine.synthesize(text, SynthesisOptions(words=words, format="float32")))

    first = say(prompt)
    again = say(prompt)
    assert not any(c.cached for c in first) and all(c.cached for c in again if c.text)
    told = [w for c in first for w in c.words]
    assert [w.text for w in told] == ["Thank", "you", "for", "calling."]
    assert [w for c in again for w in c.words] == told  # the same audio, the same times
    lead = "Hello there. "
    other = say(lead + prompt)  # the second sentence from the cache, at offset 13
    assert [c.cached for c in other if c.text][-1]
    tail = [w for c in other for w in c.words][-4:]
    assert [w.text for w in tail] == [w.text for w in told]
    assert [w.char_start - len(lead) for w in tail] == [w.char_start for w in told]
    shift = tail[0].start_s - told[0].start_s
    assert shift > 0.3  # after the first sentence and its pause
    for a, b in zip(tail, told, strict=True):
        assert abs(a.start_s - shift - b.start_s) < 1e-6 and abs(a.end_s - shift - b.end_s) < 1e-6
    # kept without words (a request that did not ask): synthesized again when they are
    plain = "Your order ships today."
    say(plain, words=False)
    assert not any(c.cached for c in say(plain)) and all(c.cached for c in say(plain) if c.text)
