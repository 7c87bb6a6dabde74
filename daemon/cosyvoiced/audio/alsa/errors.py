"""Typed ALSA errors and the one gate every native return code goes through.

`check(rc, device, op)` turns a negative libasound return code into a typed error that
names the device and the call. Callers catch by class: `XrunError` is recovered in place, `DeviceGone` triggers a reopen with
back-off, the rest are configuration problems reported once.
"""

from __future__ import annotations

import errno

from cosyvoiced.errors import CosyvoicedError

__all__ = [
    "AlsaError",
    "DeviceBusy",
    "DeviceGone",
    "DeviceNotFound",
    "PeriodRefused",
    "Suspended",
    "UnsupportedFormat",
    "XrunError",
    "check",
    "classify",
]


class AlsaError(CosyvoicedError):
    """An ALSA call failed on a device."""

    code = "alsa_error"

    def __init__(self, errno_code: int, device: str, message: str) -> None:
        super().__init__(f"{device}: {message}")
        self.errno = errno_code
        self.device = device
        self.message = message


class DeviceNotFound(AlsaError):
    """No such PCM (unknown name, missing card, missing PulseAudio sink/source)."""

    code = "alsa_device_not_found"


class DeviceBusy(AlsaError):
    """The PCM is held by another client."""

    code = "alsa_device_busy"


class UnsupportedFormat(AlsaError):
    """The device refused the access, format, rate or channel count asked for."""

    code = "alsa_unsupported_format"


class PeriodRefused(UnsupportedFormat):
    """The device refused the period/buffer sizes asked for."""

    code = "alsa_period_refused"


class DeviceGone(AlsaError):
    """The device vanished mid-stream (unplugged, server gone): reopen with back-off."""

    code = "alsa_device_gone"


class XrunError(AlsaError):
    """Overrun (capture) or underrun (playback): recover in place and count it."""

    code = "alsa_xrun"


class Suspended(XrunError):
    """The device was suspended (ESTRPIPE): recover in place and count it."""

    code = "alsa_suspended"


_GONE = {errno.ENODEV, errno.ENXIO, errno.EBADFD, errno.ESHUTDOWN, errno.ENOTCONN,
         errno.EIO, errno.ECONNRESET}


def classify(errno_code: int, op: str) -> type[AlsaError]:
    """Error class for a positive errno raised by operation `op`.

    `op` names the libasound call ("snd_pcm_open", "hw_params_set_rate", "mmap_begin"...):
    the same errno means different things when opening, configuring or streaming.
    """
    if errno_code == errno.EPIPE:
        return XrunError
    if errno_code == errno.ESTRPIPE:
        return Suspended
    if errno_code == errno.EBUSY:
        return DeviceBusy
    if op.startswith("snd_pcm_open"):
        # pulse: a missing sink/source shows as EIO; hw: ENODEV/ENXIO; names: ENOENT.
        if errno_code in (errno.ENOENT, errno.ENODEV, errno.ENXIO, errno.EIO):
            return DeviceNotFound
        return AlsaError
    if op.startswith(("hw_params", "sw_params")):
        if "period" in op or "buffer" in op:
            return PeriodRefused
        if errno_code in (errno.EINVAL, errno.ENOENT):
            return UnsupportedFormat
        if errno_code in _GONE:
            return DeviceNotFound  # e.g. a pulse stream that cannot be created
        return AlsaError
    if errno_code in _GONE:
        return DeviceGone
    return AlsaError


def _strerror(errno_code: int) -> str:
    from cosyvoiced.audio.alsa import libasound

    return libasound.strerror(-errno_code)


def check(rc: int, device: str, op: str) -> int:
    """Return `rc` if >= 0, else raise the typed error for `-rc`."""
    if rc >= 0:
        return rc
    code = -rc
    raise classify(code, op)(code, device, f"{op}: {_strerror(code)}")


def raise_for(errno_code: int, device: str, op: str, detail: str = "") -> None:
    """Raise the typed error for a positive errno (for checks done outside libasound)."""
    text = f"{op}: {_strerror(errno_code)}" + (f" ({detail})" if detail else "")
    raise classify(errno_code, op)(errno_code, device, text)
