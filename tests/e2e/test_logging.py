"""The real daemon logs to journald's native socket (a socket the test owns)."""

from __future__ import annotations

import json
import signal
import threading
import time

from tests.fixtures.journal import parse_entry


def _drain(sock, into: list[dict], stop: threading.Event) -> None:
    """Read the journal socket as journald does, from the start."""
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            into.append(parse_entry(sock.recv(65536)))
        except TimeoutError:
            continue


def test_daemon_logs_to_a_journal_socket(daemon_factory, journal):
    path, sock = journal
    entries: list[dict] = []
    stop = threading.Event()
    reader = threading.Thread(target=_drain, args=(sock, entries, stop), daemon=True)
    reader.start()
    d = daemon_factory(overrides=("log.sink=journald", f'log.journal_socket="{path}"')).start()
    d.wait_ready()
    time.sleep(0.5)
    stop.set()
    reader.join()
    seen = {e["MESSAGE"]: e for e in entries}
    ready = seen["ready"]
    assert ready["SYSLOG_IDENTIFIER"] == "cosyvoiced" and ready["PRIORITY"] == "6"
    assert "STARTUP_S" in ready and ready["CODE_FILE"].endswith("service.py")
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_a_journal_that_reads_nothing_does_not_stall_the_daemon(daemon_factory, journal):
    """journald busy or stopped: its socket queue (10 datagrams) fills up; the daemon
    drops entries rather than wait, starts, serves, and says what it dropped later."""
    path, sock = journal
    d = daemon_factory(overrides=("log.sink=journald", f'log.journal_socket="{path}"')).start()
    d.wait_ready()  # nobody read the socket all along
    status = d.ctl("--json", "status")
    assert status.returncode == 0 and json.loads(status.stdout)["state"] == "ready"
    entries = []
    sock.settimeout(0.5)
    deadline = time.monotonic() + 60  # a loaded box: each ctl call is a process start
    while time.monotonic() < deadline and not any(
            e["MESSAGE"] == "log_entries_dropped" for e in entries):
        try:  # read the backlog as fast as it comes
            entries.append(parse_entry(sock.recv(65536)))
        except TimeoutError:  # drained: something to log, now that there is room
            d.ctl("--json", "status")
    dropped = [e for e in entries if e["MESSAGE"] == "log_entries_dropped"]
    assert dropped and int(dropped[0]["COUNT"]) > 0, [e["MESSAGE"] for e in entries]
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
