"""A playback device: speech synthesized at its negotiated rate, written into its ring as
it comes (sleeping while the ring is full); stop flushes the ring."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import numpy as np
import structlog

from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.serve.devices.base import PUMP_S, Device, DeviceUnavailable
from cosyvoiced.serve.speech import Speech, Synthesis
from cosyvoiced.tts.request import SynthesisOptions

log = structlog.get_logger(__name__)


class PlaybackDevice(Device):
    """Speech -> ring -> device."""

    direction = "playback"
    policy = "refuse"

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.utterances = 0
        self.stops = 0
        self.last_spoke_s = 0.0
        self._speaking: tuple[Synthesis, asyncio.Task[None], str] | None = None
        self._on_done: Any = None
        self._flushed = False

    @property
    def speaking(self) -> bool:
        """Synthesizing, or speech still in the ring (and not flushed)."""
        return self._speaking is not None or (not self._flushed and self.ring.available() > 0)

    async def say(self, speech: Speech, text: str, options: SynthesisOptions,
                  stream_id: str) -> int:
        """Replace what is being said with `text`; returns the rate it plays at."""
        rate = self.rate_hz
        if self.state != "running" or rate is None:
            raise DeviceUnavailable(self._why(), self.name)
        synthesis = await speech.synthesize(text, replace(options, rate_hz=rate,
                                                          format="float32"), stream_id)
        self.stop()
        task = asyncio.create_task(self._feed(synthesis, rate), name=f"play-{self.name}")
        self._speaking = (synthesis, task, stream_id)
        self._flushed = False
        self.utterances += 1
        return rate

    def _why(self) -> str:
        why = f"playback device {self.name!r} is not available ({self.state})"
        if self.error is not None:
            why += f": {self.error.code}: {self.error}"
        return why

    async def _feed(self, synthesis: Synthesis, rate_hz: int) -> None:
        ring, channels = self.ring, self.cfg.channels
        resampler: StreamResampler | None = None
        try:
            async for chunk in synthesis:
                audio = chunk.audio
                if chunk.rate_hz != rate_hz:  # a Speech that ignored the asked rate
                    resampler = resampler or StreamResampler(chunk.rate_hz, rate_hz)
                    audio = resampler.process(audio)
                await self._write(audio, channels)
                # Underruns count from the first audio on, not while it is being made.
                ring.set_playing(True)
            if resampler is not None:
                await self._write(resampler.flush(), channels)
            ring.set_playing(False)  # all of it is in the ring: short reads now are the end
            while ring.available() > 0:
                await asyncio.sleep(PUMP_S)
        except Exception as exc:  # a failed synthesis ends this speech, not the device
            log.error("play_failed", device=self.name, error=str(exc),
                      code=getattr(exc, "code", "internal"))
        finally:
            if self._speaking is not None and self._speaking[1] is asyncio.current_task():
                ring.set_playing(False)  # not when replaced: the new speech owns the flag
                self._finish_speaking()

    async def _write(self, audio: np.ndarray, channels: int) -> None:
        """All of `audio` into the ring, sleeping while it is full."""
        if channels > 1:
            audio = np.repeat(audio[:, None], channels, axis=1)
        done, n = 0, audio.shape[0]
        while done < n:
            done += self.ring.write(audio[done:])
            if done < n:
                await asyncio.sleep(PUMP_S)

    def _finish_speaking(self) -> None:
        assert self._speaking is not None
        stream_id = self._speaking[2]
        self._speaking = None
        self.last_spoke_s = time.monotonic()
        if self._on_done is not None:
            self._on_done(stream_id)

    def stop(self) -> bool:
        """Cancel the synthesis and flush the ring; True if something was playing."""
        was = self.speaking
        if self._speaking is not None:
            synthesis, task, _ = self._speaking
            synthesis.cancel()
            task.cancel()
            self._finish_speaking()
        self.ring.request_flush()  # the thread drops it on its next period
        self._flushed = True
        self.ring.set_playing(False)
        if was:
            self.stops += 1
        return was

    def status(self) -> dict[str, Any]:
        return {**super().status(), "playing": self.speaking, "utterances": self.utterances,
                "stopped": self.stops}
