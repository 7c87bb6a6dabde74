"""AudioSocket frames: 1-byte kind, 2-byte big-endian payload length, payload.

One dataclass per message, each knowing its wire form; `FrameParser` is sans-I/O (bytes
in, frames out) so the same code serves the server, the test peer and the fuzzer.

Kinds as Asterisk defines them (include/asterisk/res_audiosocket.h, res/res_audiosocket.c):
0x10 is signed-linear 16-bit mono at 8 kHz; 0x11-0x18 (Asterisk 20-23, 2025) the same at
12, 16, 24, 32, 44.1, 48, 96 and 192 kHz. Asterisk picks the kind of what it sends from
the format of each frame, and anything that is not one of these slin formats goes out
as 0x10 with its bytes unchanged (so a μ-law channel's bytes arrive labelled as slin).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from enum import IntEnum

from cosyvoiced.errors import CosyvoicedError

HEADER = struct.Struct(">BH")
SLIN_8K_FRAME_BYTES = 320
"""20 ms of signed-linear 16-bit 8 kHz mono: what we send, one frame per tick."""
DTMF_DIGITS = frozenset(b"0123456789*#ABCDabcd")


class Kind(IntEnum):
    HANGUP = 0x00
    UUID = 0x01
    DTMF = 0x03
    SLIN = 0x10
    SLIN12 = 0x11
    SLIN16 = 0x12
    SLIN24 = 0x13
    SLIN32 = 0x14
    SLIN44 = 0x15
    SLIN48 = 0x16
    SLIN96 = 0x17
    SLIN192 = 0x18
    ERROR = 0xFF


AUDIO_RATES_HZ: dict[int, int] = {
    Kind.SLIN: 8000, Kind.SLIN12: 12000, Kind.SLIN16: 16000, Kind.SLIN24: 24000,
    Kind.SLIN32: 32000, Kind.SLIN44: 44100, Kind.SLIN48: 48000, Kind.SLIN96: 96000,
    Kind.SLIN192: 192000,
}
"""Audio kind -> sample rate of its signed-linear 16-bit mono payload."""
AUDIO_KINDS = frozenset(AUDIO_RATES_HZ)
MAX_FRAME_BYTES = 2 * 192000 * 60 // 1000
"""60 ms at the highest rate (192 kHz): a generous bound on one audio frame's payload
(Asterisk sends 20 ms frames)."""


def kind_name(kind: int) -> str:
    """`slin`, `slin16`, ... as Asterisk names the format (`c(slin16)`)."""
    return Kind(kind).name.lower()


def frame_samples(kind: int) -> int:
    """Samples in 20 ms of audio of this kind (882 at 44.1 kHz)."""
    return AUDIO_RATES_HZ[kind] // 50


class AsteriskErrorCode(IntEnum):
    """Payload byte of an error frame sent by Asterisk."""

    NONE = 0x00
    HANGUP = 0x01
    FRAME_FORWARDING = 0x02
    MEMORY = 0x04


class FrameError(CosyvoicedError):
    """A malformed AudioSocket frame: the peer broke the protocol; the call ends with this
    reason."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class Hangup:
    def encode(self) -> bytes:
        return HEADER.pack(Kind.HANGUP, 0)


@dataclass(frozen=True)
class CallId:
    """The first frame of a call: the channel's UUID."""

    id: uuid.UUID

    def encode(self) -> bytes:
        return HEADER.pack(Kind.UUID, 16) + self.id.bytes


@dataclass(frozen=True)
class Dtmf:
    digit: str

    def encode(self) -> bytes:
        return HEADER.pack(Kind.DTMF, 1) + self.digit.encode("ascii")


@dataclass(frozen=True)
class Audio:
    """Signed-linear 16-bit little-endian mono PCM at the rate of its kind (8 kHz for
    0x10)."""

    pcm: bytes
    kind: int = Kind.SLIN

    @property
    def rate_hz(self) -> int:
        return AUDIO_RATES_HZ[self.kind]

    def encode(self) -> bytes:
        return HEADER.pack(self.kind, len(self.pcm)) + self.pcm


@dataclass(frozen=True)
class Error:
    code: int | None

    def encode(self) -> bytes:
        if self.code is None:
            return HEADER.pack(Kind.ERROR, 0)
        return HEADER.pack(Kind.ERROR, 1) + bytes([self.code])


Frame = Hangup | CallId | Dtmf | Audio | Error


class FrameParser:
    """Incremental parser: `feed(data)` returns every complete frame, in order.

    On an unknown kind, an audio payload that is empty, odd-sized or over
    `max_payload_bytes`, a UUID that is not 16 bytes, or a bad DTMF digit, `feed` still
    returns the good frames before it and sets `error`; the connection must then end
    (a further `feed` raises that error).
    """

    def __init__(self, max_payload_bytes: int = 4096,
                 accepted_kinds: frozenset[int] = frozenset(Kind)) -> None:
        self.max_payload_bytes = max_payload_bytes
        self.accepted_kinds = accepted_kinds
        self._buf = bytearray()
        self.error: FrameError | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame held back (a peer that stops mid-frame)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        if self.error is not None:
            raise self.error
        self._buf += data
        frames: list[Frame] = []
        view = memoryview(self._buf)
        pos = 0
        try:
            while len(view) - pos >= HEADER.size:
                kind, length = HEADER.unpack_from(view, pos)
                self._check_header(kind, length)
                end = pos + HEADER.size + length
                if end > len(view):
                    break
                frames.append(self._decode(kind, bytes(view[pos + HEADER.size:end])))
                pos = end
        except FrameError as exc:
            self.error = exc
        finally:
            view.release()
            del self._buf[:pos]
        return frames

    def _check_header(self, kind: int, length: int) -> None:
        if kind not in self.accepted_kinds:
            raise FrameError("unknown_kind", f"frame kind 0x{kind:02x} is not accepted")
        if length > self.max_payload_bytes:
            raise FrameError("oversize_frame",
                             f"payload of {length} bytes exceeds {self.max_payload_bytes}")

    @staticmethod
    def _decode(kind: int, payload: bytes) -> Frame:
        if kind == Kind.HANGUP:
            return Hangup()
        if kind == Kind.UUID:
            if len(payload) != 16:
                raise FrameError("bad_uuid", f"UUID payload is {len(payload)} bytes, not 16")
            return CallId(uuid.UUID(bytes=payload))
        if kind == Kind.DTMF:
            if len(payload) != 1 or payload[0] not in DTMF_DIGITS:
                raise FrameError("bad_dtmf", f"DTMF payload {payload!r} is not one digit")
            return Dtmf(payload.decode("ascii"))
        if kind in AUDIO_KINDS:
            if not payload or len(payload) % 2:
                raise FrameError("bad_audio",
                                 f"audio payload of {len(payload)} bytes (must be even, > 0)")
            return Audio(payload, kind)
        return Error(payload[0] if payload else None)
