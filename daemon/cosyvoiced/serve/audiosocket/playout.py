"""What a call sends, in one slin format, and how queued speech moves to another format.

A `Playout` holds a call's speech at the call's rate in a small ring, the prebuilt packet
the clock thread copies each 20 ms frame into and a prebuilt frame of comfort silence, so
a tick allocates nothing. A call that began in the default format before its caller's
first audio frame adopts that frame's format: it gets a new `Playout`, and what was
queued in the old one is resampled into it (`moved`), so the speech goes on where it was.
"""

from __future__ import annotations

import numpy as np

from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.audio.ring import Ring
from cosyvoiced.serve.audiosocket.frames import AUDIO_RATES_HZ, HEADER, frame_samples


def resample_once(pcm: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    """int16 samples at `from_hz` as int16 samples at `to_hz`, the filter's tail included."""
    if from_hz == to_hz or not pcm.shape[0]:
        return pcm
    rs = StreamResampler(from_hz, to_hz, dtype=np.int16)
    return np.concatenate([rs.process(pcm), rs.flush()])


class Playout:
    """One format's send side: ring, packet and comfort frame (see the module doc)."""

    def __init__(self, kind: int, playout_ms: int, at_least: int = 0) -> None:
        self.kind = kind
        self.rate_hz = AUDIO_RATES_HZ[kind]
        self.frame_samples = frame_samples(kind)
        capacity = max(2 * self.frame_samples, playout_ms * self.rate_hz // 1000, at_least)
        self.ring = Ring.create(capacity, dtype=np.int16, policy="refuse")
        header = HEADER.pack(kind, 2 * self.frame_samples)
        self.packet = bytearray(header + bytes(2 * self.frame_samples))
        self.frame = np.frombuffer(self.packet, dtype="<i2", offset=len(header))
        """The packet's payload: the ring copies speech straight into it."""
        self.silence = bytes(self.packet)
        """A frame of comfort silence, built once."""
        self._zeros = np.zeros(self.frame_samples, dtype=np.int16)
        """Padding for a short last frame (copied from: assigning a scalar allocates)."""

    def next_speech(self) -> bytearray | None:
        """(Clock thread.) The packet holding this tick's speech, a short last frame
        padded with silence; None if there is none. Allocates nothing."""
        n = self.ring.read_into(self.frame)
        if n == 0:
            return None
        if n < self.frame_samples:  # the last of a say, or an underrun
            self.frame[n:] = self._zeros[n:]
        return self.packet

    def moved(self, kind: int, playout_ms: int) -> Playout:
        """(With the clock kept off this call.) A playout in `kind` holding what is still
        queued here, resampled to its rate (a flush asked for is honoured); this one is
        then empty and may be closed."""
        ring = self.ring
        playing = ring.playing
        ring.set_playing(False)  # reading it dry is not an underrun
        queued = np.empty(ring.capacity_frames, dtype=np.int16)
        queued = resample_once(queued[:ring.read_into(queued)], self.rate_hz,
                               AUDIO_RATES_HZ[kind])
        new = Playout(kind, playout_ms, at_least=queued.shape[0])
        new.ring.write(queued)
        new.ring.set_playing(playing)
        return new

    def close(self) -> None:
        self.ring.close()
        self.ring.unlink()
