"""A flood of idle HTTP connections is bounded per listener (api.max_connections): those
past it get 503 overloaded, while an AudioSocket call is still answered and the control
socket still serves."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import numpy as np

from cosyvoiced.testing.audiosocket_peer import Peer

CAP = 16


def test_idle_http_flood_does_not_refuse_a_call(daemon_factory):
    d = daemon_factory(overrides=(f"api.max_connections={CAP}", "api.request_timeout_s=60",
                                  'audiosocket.greeting="Hello, thanks for calling."')).start()
    d.wait_ready()
    listeners = json.loads(d.ctl("--json", "status").stdout)["listeners"]
    http = [x for x in listeners if x.startswith("tcp://")][0]
    hhost, hport = http.removeprefix("tcp://").rsplit(":", 1)
    ahost, aport = [x for x in listeners if x.startswith("audiosocket://")][0] \
        .removeprefix("audiosocket://").rsplit(":", 1)

    async def main() -> tuple[list[bytes], int, bool]:
        held = [await asyncio.open_connection(hhost, int(hport)) for _ in range(CAP + 10)]
        await asyncio.sleep(0.3)
        reads = [asyncio.ensure_future(r.read()) for r, _ in held]
        pending = set(reads)
        while pending:  # the answers, until none comes for 0.2 s
            done, pending = await asyncio.wait(pending, timeout=0.2,
                                               return_when=asyncio.FIRST_COMPLETED)
            if not done:
                break
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        # idle and held (the flood): no answer
        answers = [b"" if t.cancelled() else t.result() for t in reads]
        peer = Peer(ahost, int(aport))
        await peer.connect()
        await peer.play(np.zeros(8000 * 2, dtype=np.int16))
        await peer.hangup()
        await peer.close()
        # the control socket has its own count
        status_ok = (await asyncio.to_thread(d.ctl, "--json", "status")).returncode == 0
        for _, w in held:
            w.close()
        return answers, len(peer.call.audio_times()), status_ok

    answers, frames, status_ok = asyncio.run(main())
    refused = [a for a in answers if a]
    assert len(refused) == 10, [a[:40] for a in answers]
    assert all(a.startswith(b"HTTP/1.1 503") and b'"overloaded"' in a for a in refused)
    assert frames > 50  # the greeting was played to the caller
    assert status_ok
    with urllib.request.urlopen(f"http://{hhost}:{hport}/healthz", timeout=30) as resp:
        assert resp.status == 200  # the flood gone, the listener serves again
    assert any(e.get("event") == "http_connections_capped" for e in d.log_events())
