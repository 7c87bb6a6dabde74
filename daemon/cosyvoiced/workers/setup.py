"""What a worker process is started with besides its slot: one frozen dataclass.

The pool builds it from the config and pickles it to the child at spawn; the worker
side reads it. Standard library only, like the rest of what a spawned worker imports
before it pins itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AsrLink:
    """Where a worker sends its Whisper batches: the box's one ASR process."""

    address: str
    """Its Unix socket, in a directory only the daemon's user may enter."""
    authkey: bytes
    """The daemon's random key: only its own processes connect."""
    languages: tuple[str, ...]
    """What the loaded model transcribes (a listen request is checked against it)."""


@dataclass(frozen=True)
class WorkerSetup:
    """Everything a worker needs besides its slot; pickled to the child at spawn."""

    tts: Any
    """`TtsConfig`."""
    vad: Any
    """`VadConfig`."""
    cache_dir: str | None
    state_dir: str | None
    onnx_threads: int = 1
    policy: str = "edf"
    lookahead_s: float = 3.0
    first_audio_s: float = 1.5
    work_conserving: bool = True
    clause_max_chars: int = 80
    vad_capacity: int = 1024
    """VAD slots per rate in one worker."""
    vad_tick_ms: float = 16.0
    log_level: str = "info"
    log_sink: str = "json"
    journal_socket: str = "/run/systemd/journal/socket"
    warm_up: bool = True
    asr: Any = None
    """`AsrConfig` (None: listen streams give VAD events only)."""
    asr_link: AsrLink | None = None
    """The ASR process's socket, set by the pool once it is up (`asr.enabled`)."""
    lexicon: Any = None
    """`Lexicon` of `tts.lexicon`, parsed by the main process (None: none)."""
