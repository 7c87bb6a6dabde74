"""What the HTTP app asks of the daemon (`make_app(daemon)`), with the speech side faked."""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cosyvoiced.config.schema import Config
from cosyvoiced.listen.events import EventBus
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.agent import Capacity
from cosyvoiced.serve.streams import Streams
from tests.fakes.speech import FakeSpeech


@dataclass
class FakeDaemon:
    speech: FakeSpeech = field(default_factory=FakeSpeech)
    streams: Streams = field(default_factory=lambda: Streams(100))
    metrics: Metrics = field(default_factory=Metrics)
    bus: EventBus = field(default_factory=EventBus)
    audiosocket: object = None
    ready: bool = True
    debug: bool = False
    config: Config = field(default_factory=Config)
    spare: float = 1.0

    def status(self) -> dict[str, Any]:
        return {"state": "ready"}

    def healthy(self) -> tuple[bool, list[str]]:
        return True, []

    def capacity(self) -> Capacity:
        return Capacity("ready" if self.ready else "draining", True, (), self.spare, 32)


def wav_bytes(samples: np.ndarray, rate_hz: int) -> bytes:
    """int16 mono samples as a WAV file (an upload)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate_hz)
        w.writeframes(samples.astype("<i2").tobytes())
    return buf.getvalue()
