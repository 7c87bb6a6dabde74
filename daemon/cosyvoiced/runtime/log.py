"""structlog set-up: native journald entries under systemd, JSON lines elsewhere.

journald entries are sent as datagrams in journald's native format, one field per event
key in upper case (STREAM_ID, CALL_ID, LATENCY_MS, ...), so `journalctl CALL_ID=...`
filters. Written by hand because it is tiny and python-systemd needs libsystemd headers.
"""

from __future__ import annotations

import array
import contextlib
import json
import logging
import os
import re
import socket
import struct
import sys
from typing import Any, Literal, TextIO

import structlog

IDENTIFIER = "cosyvoiced"
LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_PRIORITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2, "exception": 3}
_FIELD_OK = re.compile(r"[^A-Z0-9_]")

SinkName = Literal["auto", "journald", "json"]


class _State:
    min_level = LEVELS["info"]
    journal: JournalLogger | None = None


def set_level(level: str) -> None:
    """Change the lowest logged level (applied live on SIGHUP)."""
    _State.min_level = LEVELS[level]


def _filter_level(_logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    if LEVELS.get("error" if method == "exception" else method, 20) < _State.min_level:
        raise structlog.DropEvent
    return event


def running_under_journal(journal_socket: str) -> bool:
    """True when stderr is the journal, or systemd started us and journald listens."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    if stream:
        try:
            st = os.fstat(sys.stderr.fileno())
            dev, ino = (int(x) for x in stream.split(":"))
            if (st.st_dev, st.st_ino) == (dev, ino):
                return True
        except (ValueError, OSError):
            pass
    return "INVOCATION_ID" in os.environ and os.path.exists(journal_socket)


def journal_field_name(key: str) -> str:
    """A journald field name: upper case, [A-Z0-9_], not starting with '_' or a digit."""
    name = _FIELD_OK.sub("_", key.upper()).lstrip("_")
    if not name or name[0].isdigit():
        name = "F_" + name
    return name[:64]


def encode_journal_entry(fields: dict[str, str]) -> bytes:
    """journald's native protocol: KEY=value lines; values with newlines length-prefixed."""
    out = bytearray()
    for key, value in fields.items():
        data = value.encode("utf-8", "replace")
        if b"\n" in data:
            out += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += key.encode() + b"=" + data + b"\n"
    return bytes(out)


class JournalLogger:
    """structlog logger that sends each rendered entry to journald's native socket."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        # Never wait for journald: a full socket queue (10 datagrams by default, while
        # journald is busy or stopped) would stall the event loop or an audio thread.
        self._sock.setblocking(False)
        self.dropped = 0
        """Entries dropped on a full socket since the last one that went through."""

    def _send(self, entry: bytes) -> None:
        try:
            self._sock.sendto(entry, self._path)
        except BlockingIOError:
            self.dropped += 1
            return
        except OSError as exc:
            if exc.errno in (90, 105):  # EMSGSIZE / ENOBUFS: pass a sealed memfd instead
                self._send_memfd(entry)
            else:  # the journal is gone: keep the message on stderr rather than lose it
                sys.stderr.write(entry.decode("utf-8", "replace"))
            return
        if self.dropped:  # say what was lost, once the journal takes entries again
            n, self.dropped = self.dropped, 0
            with contextlib.suppress(OSError):
                self._sock.sendto(f"MESSAGE=log_entries_dropped\nPRIORITY=4\n"
                                  f"SYSLOG_IDENTIFIER={IDENTIFIER}\nCOUNT={n}\n".encode(),
                                  self._path)

    def _send_memfd(self, entry: bytes) -> None:
        fd = os.memfd_create("journal-entry", os.MFD_CLOEXEC)
        try:
            os.write(fd, entry)
            fds = array.array("i", [fd])
            self._sock.sendmsg([], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)], 0, self._path)
        except BlockingIOError:
            self.dropped += 1
        finally:
            os.close(fd)

    def close(self) -> None:
        self._sock.close()

    def __getattr__(self, _name: str) -> Any:
        return self._send


class JournalRenderer:
    """Turns an event dict into a native journald entry."""

    def __call__(self, _logger: Any, method: str, event: dict[str, Any]) -> bytes:
        fields: dict[str, str] = {
            "MESSAGE": str(event.pop("event", "")),
            "PRIORITY": str(_PRIORITY.get(method, 6)),
            "SYSLOG_IDENTIFIER": IDENTIFIER,
        }
        for src, dst in (("pathname", "CODE_FILE"), ("lineno", "CODE_LINE"),
                         ("func_name", "CODE_FUNC")):
            if src in event:
                fields[dst] = str(event.pop(src))
        event.pop("level", None)
        for key, value in event.items():
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            fields.setdefault(journal_field_name(key), text)
        return encode_journal_entry(fields)


class _StdlibBridge(logging.Handler):
    """Routes records from libraries (aiohttp, asyncio, ...) through structlog."""

    def emit(self, record: logging.LogRecord) -> None:
        level = record.levelname.lower()
        log = structlog.get_logger(record.name)
        kw: dict[str, Any] = {"logger": record.name}
        if _peer_fault(record):  # a client's bad request: not our error, and not a traceback
            log.debug(record.getMessage(), logger=record.name, error=str(record.exc_info[1]))
            return
        if record.exc_info:
            kw["exc_info"] = record.exc_info
        getattr(log, level if level in LEVELS else "info")(record.getMessage(), **kw)


def _peer_fault(record: logging.LogRecord) -> bool:
    """aiohttp's "Error handling request" for a request its peer got wrong (not HTTP,
    headers too large, a bad chunk): at error level with a traceback, any client could
    write error lines at will; the answer (400/431) already tells the client."""
    if not record.name.startswith("aiohttp") or not record.exc_info:
        return False
    from aiohttp.http_exceptions import HttpProcessingError

    return isinstance(record.exc_info[1], HttpProcessingError)


def setup_logging(level: str = "info", sink: SinkName = "auto",
                  journal_socket: str = "/run/systemd/journal/socket",
                  stream: TextIO | None = None) -> str:
    """Configure structlog once per process; returns the sink actually chosen."""
    set_level(level)
    if sink == "auto":
        sink = "journald" if running_under_journal(journal_socket) else "json"
    callsite = structlog.processors.CallsiteParameterAdder(
        {structlog.processors.CallsiteParameter.PATHNAME,
         structlog.processors.CallsiteParameter.LINENO,
         structlog.processors.CallsiteParameter.FUNC_NAME},
        additional_ignores=["cosyvoiced.log", "logging"],
    )
    common: list[Any] = [
        structlog.contextvars.merge_contextvars,
        _filter_level,
        structlog.processors.add_log_level,
        structlog.processors.format_exc_info,
    ]
    if _State.journal is not None:
        _State.journal.close()
        _State.journal = None
    if sink == "journald":
        processors = [*common, callsite, JournalRenderer()]
        journal = _State.journal = JournalLogger(journal_socket)  # one socket per process
        factory: Any = lambda *_a: journal  # noqa: E731
    else:
        processors = [*common, structlog.processors.TimeStamper(fmt="iso", utc=True),
                      structlog.processors.JSONRenderer(default=str)]
        factory = structlog.PrintLoggerFactory(stream or sys.stdout)
    structlog.configure(processors=processors, logger_factory=factory,
                        cache_logger_on_first_use=False)
    root = logging.getLogger()
    root.handlers[:] = [_StdlibBridge()]
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    return sink
