"""A worker's Whisper: its batches decoded by the box's one ASR process (`asr_serve`).

`RemoteAsr` is the worker's `Decoder` (`asr_sched`): `transcribe` sends one batch and
waits for its transcripts, on the `AsrRunner` thread, off the worker's loop. It connects
on first use and again after a failure. When the ASR process dies mid-batch (the pool
restarts it), the batch is sent again to its successor for up to `RECONNECT_S`, then its
utterances fail with a typed `asr_unavailable`; a batch not answered within
`DECODE_TIMEOUT_S` fails with `asr_timeout` and its connection is dropped. Either way
only those utterances fail: the worker, its other streams and its TTS go on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection
from typing import Any

import structlog

from cosyvoiced.listen.asr import AsrError, Utterance
from cosyvoiced.listen.languages import resolve_language
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.setup import AsrLink

log = structlog.get_logger(__name__)

RECONNECT_S = 15.0
"""How long a batch waits for the ASR process to come back (a restart loads Whisper in
~1-3 s on a busy box)."""
DECODE_TIMEOUT_S = 60.0
"""Longest wait for one batch's transcripts (a full batch on a loaded box takes seconds)."""
RETRY_S = 0.1


class RemoteAsr:
    """Whisper batches over the ASR process's socket; the same face as `WhisperAsr`."""

    def __init__(self, link: AsrLink, cfg: Any, *, reconnect_s: float = RECONNECT_S,
                 timeout_s: float = DECODE_TIMEOUT_S) -> None:
        self.link = link
        self.cfg = cfg
        """`AsrConfig`: its live keys travel with each batch (`reconfigure` sets them)."""
        self.languages: tuple[str, ...] = link.languages
        self.reconnect_s = reconnect_s
        self.timeout_s = timeout_s
        self.last_cpu_s = 0.0
        """CPU seconds the ASR process charged the last batch."""
        self._conn: Connection | None = None

    def check_language(self, language: str) -> str:
        """The code of `language` ("" stays ""), or LanguageError naming `languages`."""
        return resolve_language(language, self.languages)

    def transcribe(self, utterances: Sequence[Utterance]) -> list[Any]:
        """One Transcript (or typed error) per utterance; AsrError when the ASR process
        stays away or does not answer."""
        req = m.DecodeBatch(tuple(utterances), self.cfg)
        t0 = time.monotonic()
        deadline, lost = t0 + self.reconnect_s, 0
        while True:
            sent = False
            try:
                conn = self._connect()
                conn.send(req)
                sent = True
                if not conn.poll(self.timeout_s):
                    self.close()
                    raise AsrError(f"the ASR process did not answer within {self.timeout_s:g} s",
                                   code="asr_timeout")
                reply = m.recv(conn, (m.Decoded,))
            except (OSError, EOFError, AuthenticationError, m.WorkerProtocolError) as exc:
                self.close()
                if time.monotonic() >= deadline:
                    raise AsrError(f"the ASR process is unavailable ({exc.__class__.__name__})",
                                   code="asr_unavailable") from exc
                lost += sent  # sent and not answered: lost with the process
                time.sleep(RETRY_S)
                continue
            if lost:
                log.warning("asr_batch_resent", utterances=len(req.utterances), lost=lost,
                            waited_s=round(time.monotonic() - t0, 2))
            self.last_cpu_s = reply.cpu_s
            return list(reply.results)

    def _connect(self) -> Connection:
        if self._conn is None:
            self._conn = Client(self.link.address, family="AF_UNIX", authkey=self.link.authkey)
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
