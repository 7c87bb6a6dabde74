"""journald native entries and the JSON-lines fallback."""

from __future__ import annotations

import io
import json
import socket
import struct

import structlog

from cosyvoiced.runtime.log import encode_journal_entry, journal_field_name, setup_logging
from tests.fixtures.journal import parse_entry


def test_field_names_are_journald_safe():
    assert journal_field_name("call_id") == "CALL_ID"
    assert journal_field_name("latency-ms") == "LATENCY_MS"
    assert journal_field_name("_private") == "PRIVATE"
    assert journal_field_name("3d") == "F_3D"


def test_multiline_values_are_length_prefixed():
    entry = encode_journal_entry({"MESSAGE": "a\nb", "X": "y"})
    assert parse_entry(entry) == {"MESSAGE": "a\nb", "X": "y"}


def test_journald_sink_sends_fields(journal):
    path, sock = journal
    assert setup_logging("info", "journald", str(path)) == "journald"
    log = structlog.get_logger("t")
    log.info("transcript_ready", call_id="c-42", latency_ms=310, rtf=0.12)
    log.debug("dropped below level")
    try:
        raise ValueError("bad frame")
    except ValueError:
        log.exception("frame_failed", stream_id="s1")
    first = parse_entry(sock.recv(65536))
    assert first["MESSAGE"] == "transcript_ready"
    assert first["PRIORITY"] == "6" and first["SYSLOG_IDENTIFIER"] == "cosyvoiced"
    assert first["CALL_ID"] == "c-42" and first["LATENCY_MS"] == "310" and first["RTF"] == "0.12"
    assert first["CODE_FILE"].endswith("test_logging.py") and first["CODE_FUNC"]
    assert int(first["CODE_LINE"]) > 0
    second = parse_entry(sock.recv(65536))
    assert second["MESSAGE"] == "frame_failed" and second["PRIORITY"] == "3"
    assert "ValueError: bad frame" in second["EXCEPTION"] and second["STREAM_ID"] == "s1"


def test_huge_entry_goes_through_a_memfd(journal):
    path, sock = journal
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    setup_logging("info", "journald", str(path))
    structlog.get_logger("t").info("big", blob="x" * 400_000)
    msg, anc, _flags, _addr = sock.recvmsg(65536, socket.CMSG_SPACE(4))
    if anc:  # passed as a file descriptor, the way journald accepts large entries
        fd = struct.unpack("i", anc[0][2][:4])[0]
        import os
        data = os.pread(fd, 1 << 20, 0)
        os.close(fd)
    else:
        data = msg
    assert parse_entry(data)["BLOB"] == "x" * 400_000


def test_json_sink_one_object_per_line():
    out = io.StringIO()
    setup_logging("debug", "json", stream=out)
    structlog.get_logger("t").info("hello", call_id="abc")
    structlog.get_logger("t").debug("detail", n=1)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["event"] == "hello" and lines[0]["call_id"] == "abc"
    assert lines[0]["level"] == "info" and "timestamp" in lines[0]
    assert lines[1]["event"] == "detail"


def test_auto_sink_picks_journald_under_systemd(journal, monkeypatch):
    path, _ = journal
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    monkeypatch.delenv("INVOCATION_ID", raising=False)
    assert setup_logging("info", "auto", str(path)) == "json"
    monkeypatch.setenv("INVOCATION_ID", "0123")
    assert setup_logging("info", "auto", str(path)) == "journald"


def test_a_peers_bad_request_is_no_error_line():
    """aiohttp logs a malformed request at error level with a traceback: a hostile client
    could fill the journal with errors. It goes to debug, one line, no traceback."""
    import logging

    from aiohttp.http_exceptions import BadHttpMessage

    out = io.StringIO()
    setup_logging("debug", "json", stream=out)
    try:
        raise BadHttpMessage("Pause on PRI/Upgrade")
    except BadHttpMessage:
        logging.getLogger("aiohttp.server").exception("Error handling request")
    try:
        raise RuntimeError("ours")
    except RuntimeError:
        logging.getLogger("aiohttp.server").exception("Error handling request")
    peer, ours = [json.loads(line) for line in out.getvalue().splitlines()]
    assert peer["level"] == "debug" and "exception" not in peer and "PRI" in peer["error"]
    assert ours["level"] == "error" and "RuntimeError: ours" in ours["exception"]
