"""ASR-side stand-ins: a decoder with Whisper's `transcribe` interface, and utterances."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from cosyvoiced.listen.asr import AsrError, Utterance
from cosyvoiced.listen.events import Transcript
from cosyvoiced.listen.languages import resolve_language


class FakeDecoder:
    """Transcribes each utterance as `text` formatted with its `stream` and `end_ms`.

    `fail`: every batch raises a typed `AsrError` instead. `gated`: `transcribe` blocks
    until `gate` is set (as a slow Whisper would). Records each batch's streams in
    `batches`, each decoded (stream, end_ms) in `seen`, the thread of each call in
    `threads`."""

    def __init__(self, *, fail: bool = False, gated: bool = False,
                 text: str = "text of {stream}", languages: tuple[str, ...] = ("en",)) -> None:
        self.fail = fail
        self.languages = languages
        self.text = text
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.batches: list[list[str]] = []
        self.seen: list[tuple[str, int]] = []
        self.threads: list[int] = []

    def transcribe(self, utts: Sequence[Utterance]) -> list[Transcript]:
        self.threads.append(threading.get_ident())
        assert self.gate.wait(10)
        if self.fail:
            raise AsrError("boom", code="asr_decode")
        self.batches.append([u.stream for u in utts])
        self.seen += [(u.stream, u.end_ms) for u in utts]
        return [Transcript(self.text.format(stream=u.stream, end_ms=u.end_ms), u.start_ms,
                           u.end_ms, 1.0, 0.1, u.stream, u.language or self.languages[0])
                for u in utts]

    def check_language(self, language: str) -> str:
        return resolve_language(language, self.languages)


def utt(stream: str, end_s: float, end_ms: int = 1000) -> Utterance:
    """An utterance of `stream` from 0 to `end_ms` whose speech ended at `end_s`."""
    return Utterance(np.zeros((10, 80), np.float32), 0, end_ms, end_s, stream)
