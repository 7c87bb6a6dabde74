"""The real daemon logs to journald's native socket (a socket the test owns)."""

from __future__ import annotations

import signal

from tests.fixtures.journal import parse_entry


def test_daemon_logs_to_a_journal_socket(daemon_factory, journal):
    path, sock = journal
    d = daemon_factory(overrides=("log.sink=journald", f'log.journal_socket="{path}"')).start()
    d.wait_ready()
    seen = {}
    while "ready" not in seen:
        entry = parse_entry(sock.recv(65536))
        seen[entry["MESSAGE"]] = entry
    ready = seen["ready"]
    assert ready["SYSLOG_IDENTIFIER"] == "cosyvoiced" and ready["PRIORITY"] == "6"
    assert "STARTUP_S" in ready and ready["CODE_FILE"].endswith("service.py")
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
