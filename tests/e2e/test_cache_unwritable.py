"""A daemon whose cache_dir is read-only (a real read-only bind mount) still starts, loads
its voice, VAD and Whisper from the originals, and speaks."""

from __future__ import annotations

import json
import signal
import urllib.request


def test_daemon_speaks_with_a_read_only_cache_dir(daemon_factory, tmp_path):
    cache = tmp_path / "ro-cache"
    cache.mkdir()
    shell = (f"mount --bind {cache} {cache} && mount -o remount,bind,ro {cache} "
             f'&& exec "$@"')
    d = daemon_factory(wrapper=("unshare", "--mount", "--propagation", "private",
                                "sh", "-c", shell, "sh"),
                       overrides=(f"service.cache_dir={json.dumps(str(cache))}",))
    d.start()
    d.wait_ready()
    listeners = json.loads(d.ctl("--json", "status").stdout)["listeners"]
    http = [x for x in listeners if x.startswith("tcp://")][0].replace("tcp://", "http://")
    req = urllib.request.Request(f"{http}/v1/audio/speech", headers={
        "Content-Type": "application/json"}, data=json.dumps(
        {"model": "tts-1", "voice": "alloy", "input": "Hello there.",
         "response_format": "wav"}).encode())
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert len(resp.read()) > 20000
    d.signal(signal.SIGTERM)
    assert d.wait(60) == 0
    events = d.log_events()
    assert not any(e.get("level") == "error" for e in events), \
        [e for e in events if e.get("level") == "error"]
    assert any(str(e.get("event", "")).endswith("_cache_unwritable") for e in events)
    assert list(cache.iterdir()) == []
