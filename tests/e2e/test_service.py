"""End to end: the real daemon process and systemd's notify protocol.

Tests share a daemon where its config suits them and no test before them changed what
they look at: those on dev.toml (`shared`), those under a 0.4 s watchdog
(`shared_watchdog`), and the token and unread-notify tests (`guarded`). The last test of
each stops it (SIGTERM, exit 0). A test whose start fails, or that cuts its drain, starts
a daemon of its own. Only the watchdog's pings hang on the box's pace: the other tests
are `side_by_side`."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cosyvoiced.runtime.notify import monotonic_usec
from cosyvoiced.service import STATUS_EVERY_S
from tests.fixtures.daemon import DaemonProcess, SharedDaemon, active_streams, wait_idle

WATCHDOG = {"watchdog_usec": 400_000, "overrides": ("service.health_stall_s=0.5",)}
"""systemd's watchdog at 0.4 s (a ping every 0.2 s), the event loop stalled past 0.5 s."""
DRAIN = ("service.drain_timeout_s=30",)
"""The shared daemon's drain: its last test stops it with a stream active."""


@pytest.fixture(scope="module")
def live_config(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Path:
    """The shared daemon's config: dev.toml, in a file a test may rewrite and reload."""
    cfg = tmp_path_factory.mktemp("live-config") / "live.toml"
    cfg.write_text((repo_root / "configs" / "dev.toml").read_text())
    return cfg


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, live_config: Path) -> Iterator[SharedDaemon]:
    """The daemon of the tests that need no config of their own (the drain's aside)."""
    s = SharedDaemon(tmp_path_factory, "shared", config=live_config, overrides=DRAIN)
    yield s
    s.close()


@pytest.fixture(scope="module")
def shared_watchdog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    """A daemon under systemd's watchdog, for the stall test and then the lifecycle test,
    which stops it."""
    s = SharedDaemon(tmp_path_factory, "watchdog", **WATCHDOG)
    yield s
    s.close()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    """A token on TCP and systemd's watchdog at 20 ms (a ping every 10 ms), parts neither
    test of it touches in the other: the token test, then the unread-notify test, which
    stops it."""
    s = SharedDaemon(tmp_path_factory, "guarded", watchdog_usec=20_000,
                     overrides=('api.token="s3cret"',))
    yield s
    s.close()


def _tcp(d: DaemonProcess) -> str:
    return [x for x in d.listeners() if x.startswith("tcp://")][0].replace("tcp://", "http://")


def _post_unix(sock: str, path: str, body: dict) -> int:
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                          "--unix-socket", sock, "-X", "POST", "-H",
                          "Content-Type: application/json", "-d", json.dumps(body),
                          f"http://cosyvoiced{path}"], capture_output=True, text=True, timeout=30)
    return int(out.stdout or 0)


def test_frozen_event_loop_stops_watchdog_pings(shared_watchdog):
    d = shared_watchdog.get()
    tcp = _tcp(d)
    req = urllib.request.Request(f"{tcp}/v1/debug/stall", data=b'{"seconds": 3}',
                                 headers={"Content-Type": "application/json"})
    try:  # a local user over TCP may not stall the loop: the control socket only
        urllib.request.urlopen(req, timeout=10)
        raise AssertionError("debug endpoint answered over TCP")
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
    time.sleep(0.6)
    assert _post_unix(str(d.socket), "/v1/debug/stall", {"seconds": 3}) == 202
    t0 = time.monotonic()
    time.sleep(3.0)
    # after the stall limit (0.5 s) plus one ping interval, no ping may arrive
    assert d.notify.times("WATCHDOG", t0 + 0.8, t0 + 2.9) == []
    # once the loop runs again, pings resume
    d.notify.wait_for("WATCHDOG", "1", after=t0 + 3.0, timeout_s=5)
    assert any(e.get("event") == "watchdog_withheld" and "event_loop" in e.get("stalled", [])
               for e in d.log_events())


def test_lifecycle_ready_watchdog_reload_stop(shared_watchdog):
    d = shared_watchdog.get()  # stopped here: the watchdog daemon's last test
    # periodic WATCHDOG=1 every half interval (0.2 s)
    t0 = time.monotonic()
    time.sleep(1.5)
    pings = d.notify.times("WATCHDOG", t0, time.monotonic())
    assert len(pings) >= 4, pings
    gaps = [b - a for a, b in zip(pings, pings[1:], strict=False)]
    assert max(gaps) < 0.6, gaps

    # SIGHUP: RELOADING=1 with a current MONOTONIC_USEC, then READY=1 again
    before_us = monotonic_usec()
    hup_at = time.monotonic()
    d.signal(signal.SIGHUP)
    _, reloading = d.notify.wait_for("RELOADING", "1", after=hup_at, timeout_s=10)
    assert before_us <= int(reloading["MONOTONIC_USEC"]) <= monotonic_usec()
    d.notify.wait_for("READY", "1", after=hup_at, timeout_s=10)

    # status over the control socket
    st = d.ctl("--json", "status")
    assert st.returncode == 0, st.stderr
    status = json.loads(st.stdout)
    assert status["state"] == "ready" and status["streams"]["active"] == 0
    human = d.ctl("status")
    assert "state:    ready" in human.stdout and "uptime:" in human.stdout

    # SIGTERM: STOPPING=1 and a clean exit
    term_at = time.monotonic()
    d.signal(signal.SIGTERM)
    d.notify.wait_for("STOPPING", "1", after=term_at, timeout_s=10)
    assert d.wait(30) == 0


@pytest.mark.side_by_side
def test_metrics_scrape_parses_and_counts_streams(shared):
    from prometheus_client.parser import text_string_to_metric_families

    d = shared.get()
    tcp = _tcp(d)

    def scrape() -> dict[str, float]:
        with urllib.request.urlopen(f"{tcp}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {f"{s.name}{sorted(s.labels.items())}": s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    before = scrape()
    assert "cosyvoiced_worker_restarts_total[]" in before
    assert active_streams(d) == 0
    # (the shared daemon is stopped once this stream has ended)
    assert _post_unix(str(d.socket), "/v1/debug/hold-stream", {"seconds": 5}) == 202
    after = scrape()
    assert after["cosyvoiced_active_streams[('kind', 'debug')]"] == 1


@pytest.mark.side_by_side
def test_no_watchdog_pings_without_watchdog_usec(shared):
    d = shared.get()
    ready = d.wait_ready()  # its first READY=1
    time.sleep(max(0.0, ready + 1.0 - time.monotonic()))
    assert d.notify.times("WATCHDOG", ready, time.monotonic()) == []


def _reloads(d: DaemonProcess) -> list[dict]:
    return [e for e in d.log_events() if e.get("event") == "reloaded"]


def _reload(d: DaemonProcess, timeout_s: float = 10.0) -> dict:
    """SIGHUP; READY=1 again, and the `reloaded` event it logged."""
    count, hup = len(_reloads(d)), time.monotonic()
    d.signal(signal.SIGHUP)
    d.notify.wait_for("READY", "1", after=hup, timeout_s=timeout_s)
    deadline = time.monotonic() + timeout_s
    while len(got := _reloads(d)) <= count:
        assert time.monotonic() < deadline, "no reloaded event"
        time.sleep(0.05)
    return got[-1]


@pytest.mark.side_by_side
def test_sighup_with_broken_config_keeps_running(shared, live_config, repo_root):
    d = shared.get()
    dev = (repo_root / "configs" / "dev.toml").read_text()
    live_config.write_text("[service]\nno_such_key = 1\n")
    try:
        hup = time.monotonic()
        d.signal(signal.SIGHUP)
        d.notify.wait_for("READY", "1", after=hup, timeout_s=10)
        assert d.proc.poll() is None
        rejected = [e for e in d.log_events() if e.get("event") == "reload_rejected"]
        assert rejected and "service.no_such_key" in rejected[-1]["errors"][0]
        assert d.ctl("status").returncode == 0

        # a good change to a live key applies; a restart-only key is reported
        live_config.write_text(dev.replace('level = "info"', 'level = "debug"')
                               .replace("count = 1", "count = 2"))
        reloaded = _reload(d)
        assert "log.level" in reloaded["applied"]
        assert "workers.count" in reloaded["needs_restart"]
    finally:  # the shared daemon back on dev.toml
        live_config.write_text(dev)
    _reload(d)


@pytest.mark.side_by_side
def test_healthz_and_readyz_over_tcp(shared):
    base = _tcp(shared.get())
    with urllib.request.urlopen(f"{base}/healthz", timeout=10) as r:
        assert json.load(r)["ok"] is True
    with urllib.request.urlopen(f"{base}/readyz", timeout=10) as r:
        assert json.load(r)["ready"] is True


@pytest.mark.side_by_side
def test_bad_config_at_start_exits_78(daemon_factory):
    d = daemon_factory(overrides=("workers.onnx_threads=0",)).start()
    assert d.wait(60) == 78
    errors = [e for e in d.log_events() if e.get("event") == "bad_config"]
    assert errors and "workers.onnx_threads" in errors[0]["errors"][0]
    assert d.notify.messages == []


@pytest.mark.side_by_side
@pytest.mark.parametrize("key,value", [
    ("asr.model_dir", "EMPTY"),  # the directory is there, the model in it is not
    ("asr.model_dir", "/no/such/whisper"),
    ("tts.voice", "no_such_voice"),
    ("tts.voices_dirs", "/no/such/voices"),
])
def test_missing_model_at_start_exits_78_with_one_line(daemon_factory, tmp_path, key, value):
    # regression: a missing model made the workers die at start, exit 1, and systemd
    # restarted the daemon in a loop (it does not restart on 78)
    if value == "EMPTY":
        value = str(tmp_path / "empty")
        (tmp_path / "empty").mkdir()
    shown = json.dumps([value] if key == "tts.voices_dirs" else value)
    d = daemon_factory(overrides=(f"{key}={shown}",)).start()
    assert d.wait(60) == 78
    events = d.log_events()
    errors = [e for e in events if e.get("event") == "bad_config"]
    assert len(errors) == 1 and len(errors[0]["errors"]) == 1, events
    (line,) = errors[0]["errors"]
    assert key in line and value in line and "\n" not in line
    assert not [e for e in events if e.get("event") in ("worker_starting", "daemon_failed")]
    assert d.notify.messages == []


@pytest.mark.side_by_side
def test_second_sigterm_cuts_the_drain(daemon_factory):
    d = daemon_factory(overrides=("service.drain_timeout_s=60",)).start()
    d.wait_ready()
    port = json.loads(d.ctl("--json", "status").stdout)["listeners"]
    assert any(p.startswith("tcp://127.0.0.1:") for p in port)
    # hold a stream open so the drain has to wait
    assert _post_unix(str(d.socket), "/v1/debug/hold-stream", {"seconds": 120}) == 202
    d.signal(signal.SIGTERM)
    time.sleep(1.0)
    assert d.proc.poll() is None, "drain should wait for the active stream"
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    assert d.wait(10) == 128 + signal.SIGTERM
    assert time.monotonic() - t0 < 5


@pytest.mark.side_by_side
def test_sigterm_waits_for_active_streams_then_exits_0(shared):
    d = shared.get()  # stopped here: the shared daemon's last test
    wait_idle(d)  # an earlier test's stream ends first
    # 4 s: long enough that a slow `cosyvoicectl` start on a busy box still sees it
    assert _post_unix(str(d.socket), "/v1/debug/hold-stream", {"seconds": 4}) == 202
    assert json.loads(d.ctl("--json", "status").stdout)["streams"]["active"] == 1
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    assert d.wait(30) == 0
    took = time.monotonic() - t0
    assert 1.0 < took < 15, took


def test_token_guards_tcp_but_not_the_control_socket(guarded):
    d = guarded.get()
    assert d.ctl("status").returncode == 0  # the Unix socket: file permissions guard it
    tcp = _tcp(d)
    try:
        urllib.request.urlopen(f"{tcp}/v1/status", timeout=10)
        raise AssertionError("TCP without a token was served")
    except urllib.error.HTTPError as exc:
        assert exc.code == 401
    req = urllib.request.Request(f"{tcp}/v1/status", headers={"Authorization": "Bearer s3cret"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.load(r)["state"] == "ready"


def test_unread_notify_socket_never_freezes_the_daemon(guarded):
    # regression: STATUS= updates to a notify socket nobody reads blocked the event loop
    d = guarded.get()  # a ping every 10 ms fills it fast; stopped here: its last test
    d.notify.paused.set()  # stop reading: the socket's queue fills up
    deadline = time.monotonic() + 8.0
    while not any(e.get("event") == "notify_dropped" for e in d.log_events()) \
            and time.monotonic() < deadline:  # full: the first ping that did not fit
        time.sleep(0.1)
    # change the STATUS= line, so the event loop itself has to notify: the line is
    # looked at every STATUS_EVERY_S, so a stream held longer is in one of them
    assert _post_unix(str(d.socket), "/v1/debug/hold-stream",
                      {"seconds": STATUS_EVERY_S + 0.5}) == 202
    t0 = time.monotonic()
    while active_streams(d):  # the loop that notified ran on and ended the stream
        assert time.monotonic() - t0 < 15, "the held stream never ended"
        time.sleep(0.1)
    st = d.ctl("status")
    assert st.returncode == 0, st.stderr
    d.signal(signal.SIGTERM)
    assert d.wait(30) == 0
