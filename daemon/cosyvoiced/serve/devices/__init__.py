"""Local sound devices in the running daemon (`[[audio.devices]]`): speak on a playback
device, listen on a capture device, barge-in between them.

Every device gets a shared-memory ring and its ALSA thread (`cosyvoiced.audio.alsa.device`);
everything else happens on the event loop and never blocks it:

* playback: `say()` synthesizes at the device's negotiated rate and writes the float32
  chunks into the ring as they come, sleeping while the ring is full. Stop, a new `say()`
  and barge-in cancel the synthesis and flush the ring; the thread honours the flush on
  its next period, so the device falls silent within one period (plus what the device
  and sound server already hold).
* capture: a pump takes what the thread wrote, mixes it down to mono, resamples it to
  16 kHz and feeds the listening stream `device:<name>` (the pool publishes its events on
  the daemon's bus). Speech starting on a mic while a playback device speaks stops that
  playback (`audio.barge_in`); with `audio.half_duplex` the mic is fed silence while we
  speak and for `echo_tail_ms` after, so the speaker cannot trigger it.

A device that fails to open is reported (state "failed" with its typed code) and retried
in the background with back-off; the daemon runs on. Health sees a running thread's
`last_progress_s`; a failed or reopening device is reported in status, not a stall (the
watchdog restarting the daemon would not bring a missing sink back). Xruns, underruns,
dropped frames and ring fill go to the metrics on a slow timer.
"""


from cosyvoiced.serve.devices.base import (
    Device,
    DeviceError,
    DeviceUnavailable,
    NoPlaybackDevice,
    UnknownDevice,
)
from cosyvoiced.serve.devices.capture import CaptureDevice
from cosyvoiced.serve.devices.manager import Devices
from cosyvoiced.serve.devices.playback import PlaybackDevice

__all__ = ["CaptureDevice", "Device", "DeviceError", "DeviceUnavailable", "Devices",
           "NoPlaybackDevice", "PlaybackDevice", "UnknownDevice"]
