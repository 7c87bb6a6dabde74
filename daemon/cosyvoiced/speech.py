"""What the servers (HTTP, AudioSocket, Wyoming) may ask of the inference side.

The servers speak only to this interface; the worker pool implements it. Errors are
typed: `TtsError` subclasses for bad requests, `Overloaded` when the request cannot be
served in real time (raised before any audio, so a server can still answer 503).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .events import Transcript, VoiceStarted, VoiceStopped
from .tts.request import AudioChunk, SynthesisOptions


class Overloaded(Exception):
    """The measured load says this request cannot be served in real time."""

    code = "overloaded"


@dataclass(frozen=True)
class VoiceInfo:
    name: str
    language: str
    sample_rate_hz: int
    speakers: tuple[str, ...] = ()
    quality: str = ""


class Synthesis(Protocol):
    """One admitted synthesis: iterate for its chunks; cancel to drop what is queued."""

    rate_hz: int

    def __aiter__(self) -> AsyncIterator[AudioChunk]: ...

    def cancel(self) -> None: ...


ListenEvent = VoiceStarted | VoiceStopped | Transcript


class Listening(Protocol):
    """One admitted listening stream: feed audio, read events, close to flush."""

    rate_hz: int

    def feed(self, samples: np.ndarray) -> None:
        """Queue float32 mono samples at `rate_hz`; never blocks."""

    def events(self) -> AsyncIterator[ListenEvent]: ...

    async def close(self) -> list[Transcript]:
        """End the stream; a pending utterance is transcribed and returned."""


class Speech(Protocol):
    def voices(self) -> list[VoiceInfo]: ...

    def asr_model(self) -> str | None:
        """Name of the ASR model, or None when ASR is off."""

    async def synthesize(self, text: str | bytes, options: SynthesisOptions,
                         stream_id: str) -> Synthesis:
        """Check and admit a request (typed errors here), then stream its audio."""

    async def listen(self, rate_hz: int, stream_id: str) -> Listening:
        """Admit a listening stream at `rate_hz` (8000 or 16000)."""
