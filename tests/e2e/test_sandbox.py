"""The real daemon inside the shipped unit's sandbox (tools.sandbox: its seccomp filter, no
capabilities, no_new_privs, its own /proc, PID and IPC namespaces): it speaks, takes a
call and hears the caller, reloads and stops cleanly."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import sys
import urllib.request
import wave

import numpy as np

from cosyvoiced.testing.audiosocket_peer import Peer
from cosyvoiced.testing.prompts import prompts
from tests.fixtures.daemon import REPO


def test_daemon_works_inside_the_units_sandbox(daemon_factory):
    wrapper = (sys.executable, str(REPO / "tools" / "sandbox.py"),
               str(REPO / "systemd" / "cosyvoiced.service"), "--")
    d = daemon_factory(wrapper=wrapper, private_cache=True,  # the cold build, sandboxed too
                       overrides=('audiosocket.greeting="Hello, thanks for calling."',)).start()
    d.wait_ready()
    status = d.ctl("--json", "status")
    assert status.returncode == 0, status.stderr
    listeners = json.loads(status.stdout)["listeners"]
    http = [x for x in listeners if x.startswith("tcp://")][0].replace("tcp://", "http://")
    host, port = [x for x in listeners if x.startswith("audiosocket://")][0] \
        .removeprefix("audiosocket://").rsplit(":", 1)

    body = json.dumps({"model": "tts-1", "voice": "alloy", "response_format": "wav",
                       "input": "Your order will arrive on Tuesday."}).encode()
    req = urllib.request.Request(f"{http}/v1/audio/speech", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp, \
            wave.open(io.BytesIO(resp.read())) as w:
        pcm = np.frombuffer(w.readframes(1 << 30), dtype="<i2")
    assert pcm.shape[0] > w.getframerate() and np.abs(pcm).max() > 3000  # speech, not silence

    prompt = next(p for p in prompts() if 1.5 < p.samples().shape[0] / 8000 < 4.0)
    speech = np.clip(prompt.samples() * 32767, -32768, 32767).astype(np.int16)

    async def call() -> Peer:
        peer = Peer(host, int(port))
        await peer.connect()
        silence = np.zeros(8000 * 2, dtype=np.int16)
        await peer.play(np.concatenate([silence, speech, silence]))
        await peer.hangup()
        await peer.close()
        return peer

    peer = asyncio.run(call())
    assert len(peer.call.audio_times()) > 50  # the greeting reached the caller

    d.signal(signal.SIGHUP)
    d.notify.wait_for("RELOADING", "1", timeout_s=30)
    d.signal(signal.SIGTERM)
    assert d.wait(60) == 0
    events = d.log_events()
    names = [e.get("event") for e in events]
    assert "transcript" in names and "reloaded" in names and "call_ended" in names, names
    errors = [e for e in events if e.get("level") in ("error", "critical")]
    assert errors == [], errors
