"""What a speaking response sends for each synthesized chunk, by format.

Raw formats (`s16le`, `float32`, `mulaw`, and `wav`: s16le after a streaming RIFF
header) send the chunk's bytes as the worker encoded them. Compressed formats (`mp3`,
`opus`, `aac`, `flac`) run each chunk through a `StreamEncoder` on a worker thread (a
second of mp3 costs 14-40 ms of encoding, docs/performance.md: too long to hold the event
loop while other streams wait; PyAV lets go of the GIL meanwhile), so their first bytes
leave with the first chunk. With `sse`, whatever
the format made is sent base64 in OpenAI's `speech.audio.delta` events, closed by one
`speech.audio.done`; each chunk's words go first, as our own `speech.word` events (a
word is told no later than the audio holding its start), and a failure after the first
event ends the stream with an `error` event.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct

from cosyvoiced.audio.container import ENCODINGS, StreamEncoder
from cosyvoiced.tts.request import AudioChunk

RAW_TYPES = {"wav": "audio/wav", "s16le": "audio/L16", "float32": "audio/x-float32",
             "mulaw": "audio/basic"}
CONTENT_TYPES = {**RAW_TYPES, **{name: enc.content_type for name, enc in ENCODINGS.items()}}
"""Every format a speaking route sends, with its Content-Type."""
COMPRESSED_RATE_HZ = 24000
"""The rate compressed formats are made at unless the request names one (every encoder
takes it; a voice's own 22050 Hz is no Opus rate)."""


def wav_header(rate_hz: int, fmt: str) -> bytes:
    """A RIFF header for a stream of unknown length (sizes 0xFFFFFFFF, as streamers do)."""
    code, bits = {"s16le": (1, 16), "float32": (3, 32), "mulaw": (7, 8)}[fmt]
    block = bits // 8
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, code, 1, rate_hz, rate_hz * block, block, bits)
            + b"data" + struct.pack("<I", 0xFFFFFFFF))


def rate_ok(container: str, rate_hz: int) -> bool:
    """Can `container` carry audio at `rate_hz`?"""
    enc = ENCODINGS.get(container)
    return enc is None or not enc.rates_hz or rate_hz in enc.rates_hz


class AudioBody:
    """One response's body: `start`, then `chunk` per synthesized chunk, then `end`;
    `close` in any case (frees the encoder of a response cut short)."""

    def __init__(self, container: str, sse: bool = False) -> None:
        self.container = container
        self.sse = sse
        self._encoder: StreamEncoder | None = None

    @property
    def content_type(self) -> str:
        return "text/event-stream" if self.sse else CONTENT_TYPES[self.container]

    def sample_format(self, chunk: AudioChunk) -> str:
        """What `X-Sample-Format` says: the raw samples' format, or the codec's name."""
        return self.container if self.container in ENCODINGS else chunk.format

    def start(self, first: AudioChunk) -> bytes:
        """What goes before the first chunk's audio (a WAV header, or nothing)."""
        if self.container in ENCODINGS:
            self._encoder = StreamEncoder(self.container, first.rate_hz)
        if self.container == "wav":
            return self._wrap(wav_header(first.rate_hz, first.format))
        return b""

    async def chunk(self, chunk: AudioChunk) -> bytes:
        if self._encoder is None:
            return self._wrap(chunk.data)
        return self._wrap(await asyncio.to_thread(self._encoder.encode, chunk.audio))

    async def end(self) -> bytes:
        """The encoder's tail and, with `sse`, the `speech.audio.done` event."""
        tail = b""
        if self._encoder is not None:
            tail = self._wrap(await asyncio.to_thread(self._encoder.finish))
        if self.sse:
            # no tokens here: usage is reported as zero, in the shape OpenAI's clients parse
            usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
            tail += _event({"type": "speech.audio.done", "usage": usage})
        return tail

    def words(self, chunk: AudioChunk) -> bytes:
        """With `sse`: a `speech.word` event per word starting in `chunk` (before its audio)."""
        if not self.sse:
            return b""
        return b"".join(_event({"type": "speech.word", **w.to_json()}) for w in chunk.words)

    def error(self, code: str, message: str) -> bytes:
        """With `sse`: the event that ends a stream which failed part way."""
        return _event({"type": "error", "error": {"code": code, "message": message}}) \
            if self.sse else b""

    def close(self) -> None:
        if self._encoder is not None:
            self._encoder.close()

    def _wrap(self, data: bytes) -> bytes:
        if not self.sse or not data:
            return data
        return _event({"type": "speech.audio.delta",
                       "audio": base64.b64encode(data).decode("ascii")})


def _event(payload: dict[str, object]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()
