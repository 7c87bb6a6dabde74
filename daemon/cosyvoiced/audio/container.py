"""Compressed audio in and out through PyAV (FFmpeg's libraries, bundled in its wheel).

`StreamEncoder` turns float32 chunks into mp3, Ogg Opus, AAC (ADTS) or FLAC bytes as
they arrive: FFmpeg's muxer is told to flush after every packet (`flush_packets`) into
a write-only sink, so whatever the encoder has finished leaves with the chunk that
finished it, and `finish` drains the encoder's look-ahead at the end. Headers that a
muxer would rewrite by seeking back (mp3's Xing frame, FLAC's sample count) are left
out or left "unknown": the output is a stream, never seeked.

`decode` reads an uploaded file of any of the containers clients send (webm/Matroska,
Ogg, MP4/m4a, mp3, WAV, FLAC, AAC) into float32 mono at the rate asked, capped in
length. Only those demuxers may run (`format_whitelist`), so a playlist or concat file
cannot make FFmpeg open other files or URLs.

PyAV rather than libsndfile: one library both ways for every format asked (libsndfile
has no AAC, and no m4a or webm for uploads), maintained, with the encoders in its wheel.
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass, field
from typing import Any

import av
import numpy as np

from cosyvoiced.errors import CosyvoicedError

__all__ = ["ENCODINGS", "DecodeError", "Encoding", "StreamEncoder", "decode"]


@dataclass(frozen=True)
class Encoding:
    """How one compressed format is made: FFmpeg muxer, encoder, MIME type, options."""

    container: str
    codec: str
    content_type: str
    options: dict[str, str] = field(default_factory=dict)
    """Muxer options (a stream is never seeked: no header rewritten at the end)."""
    rates_hz: tuple[int, ...] = ()
    """The encoder's sample rates (empty: any)."""
    bit_rate: int = 0
    """bits/s asked of the encoder (0: its default)."""


ENCODINGS: dict[str, Encoding] = {
    "mp3": Encoding("mp3", "libmp3lame", "audio/mpeg",
                    {"write_xing": "0", "id3v2_version": "0"},
                    (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000),
                    64000),  # LAME's default for 24 kHz mono is 32 kb/s: audibly coarse
    "opus": Encoding("ogg", "libopus", "audio/ogg",
                     {"page_duration": "20000"},  # µs: one Ogg page per Opus packet
                     (8000, 12000, 16000, 24000, 48000)),
    "aac": Encoding("adts", "aac", "audio/aac"),
    "flac": Encoding("flac", "flac", "audio/flac"),
}
"""The compressed formats, by the name the API uses."""

DEMUXERS = "matroska,webm,ogg,mov,mp4,m4a,3gp,mp3,wav,flac,aac"
"""The demuxers `decode` lets FFmpeg pick from (matched against each demuxer's names)."""


class DecodeError(CosyvoicedError, ValueError):
    """An upload that is no audio file we read (code `unsupported_audio`), or one that
    decodes to more than the cap (code `upload_too_long`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)


class _Sink:
    """Write-only file for the muxer (no seek: FFmpeg then never rewinds)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: Any) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


class StreamEncoder:
    """One response's encoder: `encode` each chunk, then `finish` once (or `close` to
    abandon). `encode` and `finish` may run on a worker thread, one at a time; `close`
    may come from another thread meanwhile (a client gone mid-chunk): it never waits,
    the encoding call closes the encoder when it is done."""

    def __init__(self, fmt: str, rate_hz: int) -> None:
        enc = ENCODINGS[fmt]
        if enc.rates_hz and rate_hz not in enc.rates_hz:
            raise ValueError(f"{fmt} cannot encode {rate_hz} Hz")
        self.rate_hz = rate_hz
        self._sink = _Sink()
        self._out: Any = av.open(self._sink, "w", format=enc.container,
                                 options={"flush_packets": "1", **enc.options})
        self._stream: Any = self._out.add_stream(enc.codec, rate=rate_hz, layout="mono")
        if enc.bit_rate:
            self._stream.codec_context.bit_rate = enc.bit_rate
        self._pts = 0
        self._lock = threading.Lock()
        self._closing = False
        self._done = False

    def encode(self, samples: np.ndarray) -> bytes:
        """The bytes the encoder has ready after taking float32 mono `samples`."""
        x = np.ascontiguousarray(samples, dtype=np.float32).reshape(1, -1)
        try:
            with self._lock:
                if self._done:
                    return b""
                if x.shape[1]:
                    frame = av.AudioFrame.from_ndarray(x, format="flt", layout="mono")
                    frame.sample_rate = self.rate_hz
                    frame.pts = self._pts
                    self._pts += x.shape[1]
                    for packet in self._stream.encode(frame):
                        self._out.mux(packet)
                return self._sink.take()
        finally:
            if self._closing:
                self.close()

    def finish(self) -> bytes:
        """The encoder's remaining audio and the container's trailer."""
        with self._lock:
            if self._done:
                return b""
            for packet in self._stream.encode(None):
                self._out.mux(packet)
            self._done = True
            self._out.close()
            return self._sink.take()

    def close(self) -> None:
        """Abandon the stream: now, or when the call encoding right now returns."""
        self._closing = True
        if self._lock.acquire(blocking=False):
            try:
                if not self._done:
                    self._done = True
                    self._out.close()
            finally:
                self._lock.release()


def decode(data: bytes, max_s: float, rate_hz: int) -> np.ndarray:
    """float32 mono samples at `rate_hz` of the first audio stream in `data` (channels
    mixed down and rate converted by FFmpeg's resampler, as it decodes: the memory held
    is the output's); DecodeError when it is no audio we read or holds more than
    `max_s` seconds."""
    try:
        container: Any = av.open(io.BytesIO(data), "r",
                                 options={"format_whitelist": DEMUXERS})
    except (av.FFmpegError, ValueError):
        raise DecodeError("unsupported_audio", "not an audio file we read (webm, ogg, "
                          "mp4/m4a, mp3, wav, flac or aac)") from None
    with container:
        streams = [s for s in container.streams if s.type == "audio"]
        if not streams:
            raise DecodeError("unsupported_audio", "the file holds no audio stream")
        limit = int(max_s * rate_hz)
        mono = av.AudioResampler(format="flt", layout="mono", rate=rate_hz)
        parts: list[np.ndarray] = []
        total = 0
        try:
            for frame in container.decode(streams[0]):
                for out in mono.resample(frame):
                    parts.append(out.to_ndarray().reshape(-1))
                    total += parts[-1].size
                if total > limit:
                    raise DecodeError("upload_too_long",
                                      f"the audio is longer than {max_s:.0f} s")
            for out in mono.resample(None):
                parts.append(out.to_ndarray().reshape(-1))
        except av.FFmpegError:
            if not parts:
                raise DecodeError("unsupported_audio", "the audio does not decode") from None
            # a truncated tail (a browser's upload cut short): keep what decoded
    samples = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return samples.astype(np.float32, copy=False)
