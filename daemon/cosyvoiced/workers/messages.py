"""Control messages between the pool (main process) and a worker, and between a worker
and the box's ASR process: one dataclass each.

Audio never travels here (it moves through shared-memory rings); these are the small
control and event messages. The wire format lives in this module only: a message is
pickled by `multiprocessing.connection.Connection.send` and checked on receipt against
the known types, so a stray object is a `WorkerProtocolError`, not a silent misroute.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from cosyvoiced.errors import CosyvoicedError

# --- pool -> worker -------------------------------------------------------------------


@dataclass(frozen=True)
class OpenTts:
    stream_id: str
    ring_name: str
    """Playback ring (float32 mono at `rate_hz`) the worker attaches to as producer."""
    rate_hz: int


@dataclass(frozen=True)
class Say:
    stream_id: str
    request_id: int
    text: str
    options: Any
    """`cosyvoiced.tts.request.SynthesisOptions` (rate and format are set by the stream)."""


@dataclass(frozen=True)
class Cancel:
    """Drop the stream's queued and pending audio at once (barge-in, hangup)."""

    stream_id: str


@dataclass(frozen=True)
class OpenListen:
    stream_id: str
    ring_name: str
    """Capture ring (float32 mono at `rate_hz`) the worker attaches to as consumer."""
    rate_hz: int
    language: str = ""
    """Language code its utterances are transcribed in ("": the model's choice: detected
    by a multilingual model, English by an English-only one)."""
    words: bool = False
    """Its transcripts carry word times (stream-relative)."""


@dataclass(frozen=True)
class CloseStream:
    stream_id: str


@dataclass(frozen=True)
class Adopt:
    """A warm spare takes over worker slot `index`, pinned to `cpus`."""

    index: int
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class SetPolicy:
    """Scheduling policy ("edf" | "fifo"), lookahead and first-audio hold; after a
    reload, and tests and benches switch it."""

    policy: str
    lookahead_s: float
    first_audio_s: float | None = None


@dataclass(frozen=True)
class SetListen:
    """The live `[vad]` and `[asr]` keys after a reload: `[vad]` applies to listen streams
    opened from then on, `[asr]` (beam, encoder window) to the next Whisper batch."""

    vad: Any
    """`VadConfig`."""
    asr: Any
    """`AsrConfig`."""


@dataclass(frozen=True)
class SetLexicon:
    """The `tts.lexicon` after a reload, for requests planned from then on."""

    lexicon: Any
    """`Lexicon`."""


@dataclass(frozen=True)
class Stop:
    pass


# --- worker -> pool -------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    index: int
    """Worker slot served (-1: a spare, warm and waiting to adopt a slot)."""
    pid: int
    cpus: tuple[int, ...]
    tts_rtf: float
    """Real-time factor of the warm-up synthesis."""
    vad_window_us: float
    """Cost of one VAD window in the warm-up run."""
    threads: int
    """OS threads in the worker after loading its sessions."""
    engine: str = ""
    """The default voice's engine variant as loaded: "fp32", "bf16" or "int8" ("": not
    loaded, no warm-up)."""


@dataclass(frozen=True)
class FirstAudio:
    stream_id: str
    request_id: int
    latency_s: float
    """From the worker receiving the request to its first audio in the ring."""


@dataclass(frozen=True)
class SayDone:
    stream_id: str
    request_id: int
    samples: int
    """Samples written to the ring for this request."""
    cancelled: bool = False
    rtf: float = 0.0


@dataclass(frozen=True)
class SayWords:
    """A request's words starting in its next audio (sent before that audio is in the
    ring; only for requests asking for word times)."""

    stream_id: str
    request_id: int
    words: tuple[Any, ...]
    """`cosyvoiced.tts.streaming.words.WordTime`s, times from the request's first sample."""
    until_samples: int
    """The request's samples whose words are all told once this one is."""


@dataclass(frozen=True)
class StreamError:
    stream_id: str
    request_id: int
    """-1 when the error is about the stream, not one request."""
    code: str
    message: str


@dataclass(frozen=True)
class ListenEvent:
    """A listening event of one stream (`cosyvoiced.listen.events`: voice_started, ...)."""

    stream_id: str
    event: Any


@dataclass(frozen=True)
class StreamClosed:
    """A listen stream's close is done: its ring was read to the end and its last
    transcript sent before this."""

    stream_id: str


# --- worker <-> ASR process ----------------------------------------------------------


@dataclass(frozen=True)
class DecodeBatch:
    """Utterances (`cosyvoiced.listen.asr.Utterance`, any streams) to decode in one batch."""

    utterances: tuple[Any, ...]
    cfg: Any
    """The worker's `AsrConfig`: its live keys (beam, encoder window) apply to this batch."""


@dataclass(frozen=True)
class Decoded:
    results: tuple[Any, ...]
    """One `Transcript` or typed error per utterance, in order."""
    cpu_s: float
    """CPU seconds the batch is charged (the worker's Whisper RTF for admission)."""


@dataclass(frozen=True)
class AsrReady:
    """ASR process -> pool: Whisper is loaded and warm, the socket listens."""

    pid: int
    languages: tuple[str, ...]
    warm_s: float
    """Seconds the warm-up utterance took to decode."""


TO_WORKER = (OpenTts, Say, Cancel, OpenListen, CloseStream, Adopt, SetPolicy, SetListen,
             SetLexicon, Stop)
FROM_WORKER = (Ready, FirstAudio, SayDone, SayWords, StreamError, ListenEvent, StreamClosed)


class WorkerProtocolError(CosyvoicedError):
    """A message on a worker's control pipe that is not one of the known types."""

    code = "worker_protocol"


def send(conn: Connection, msg: object) -> None:
    conn.send(msg)


def recv(conn: Connection, allowed: tuple[type, ...]) -> Any:
    """Receive one message of an allowed type (EOFError when the peer is gone)."""
    msg = conn.recv()
    if not isinstance(msg, allowed):
        raise WorkerProtocolError(f"unexpected message {type(msg).__name__}")
    return msg
