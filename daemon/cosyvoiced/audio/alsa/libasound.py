"""A small ctypes binding to libasound: just what the mmap backend needs.

pyalsaaudio has no mmap access and no sw_params, hence this. Every call that returns an
error code goes through `errors.check`. libasound's own stderr chatter is routed to
structlog at debug level instead of stderr.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from ctypes import POINTER, c_char_p, c_int, c_long, c_uint, c_ulong, c_void_p

import structlog

log = structlog.get_logger(__name__)

__all__ = ["ACCESS", "FORMATS", "ChannelArea", "lib", "strerror"]

uframes = c_ulong
sframes = c_long

STREAM_PLAYBACK = 0
STREAM_CAPTURE = 1
NONBLOCK = 1

ACCESS = {"mmap": 0, "rw": 3}  # MMAP_INTERLEAVED, RW_INTERLEAVED
FORMATS = {  # ALSA format name -> (snd_pcm_format_t, numpy dtype str)
    "S16_LE": (2, "<i2"),
    "S32_LE": (10, "<i4"),
    "FLOAT_LE": (14, "<f4"),
    "MU_LAW": (20, "u1"),
    "A_LAW": (21, "u1"),
    "S24_3BE": (35, "V3"),
}
STATE_NAMES = ("OPEN", "SETUP", "PREPARED", "RUNNING", "XRUN", "DRAINING", "PAUSED",
               "SUSPENDED", "DISCONNECTED")


class ChannelArea(ctypes.Structure):
    _fields_ = [("addr", c_void_p), ("first", c_uint), ("step", c_uint)]


def _load() -> ctypes.CDLL:
    path = ctypes.util.find_library("asound") or "libasound.so.2"
    return ctypes.CDLL(path)


lib = _load()

_P = c_void_p  # snd_pcm_t*, snd_pcm_hw_params_t*, snd_pcm_sw_params_t*
_SIGS: dict[str, tuple[type | None, list[type]]] = {
    "snd_pcm_open": (c_int, [POINTER(c_void_p), c_char_p, c_int, c_int]),
    "snd_pcm_close": (c_int, [_P]),
    "snd_pcm_hw_params_malloc": (c_int, [POINTER(c_void_p)]),
    "snd_pcm_hw_params_free": (None, [_P]),
    "snd_pcm_hw_params_any": (c_int, [_P, _P]),
    "snd_pcm_hw_params_set_access": (c_int, [_P, _P, c_int]),
    "snd_pcm_hw_params_set_format": (c_int, [_P, _P, c_int]),
    "snd_pcm_hw_params_set_channels": (c_int, [_P, _P, c_uint]),
    "snd_pcm_hw_params_set_rate_near": (c_int, [_P, _P, POINTER(c_uint), POINTER(c_int)]),
    "snd_pcm_hw_params_set_period_size_near": (
        c_int, [_P, _P, POINTER(uframes), POINTER(c_int)]),
    "snd_pcm_hw_params_set_buffer_size_near": (c_int, [_P, _P, POINTER(uframes)]),
    "snd_pcm_hw_params": (c_int, [_P, _P]),
    "snd_pcm_hw_params_get_rate": (c_int, [_P, POINTER(c_uint), POINTER(c_int)]),
    "snd_pcm_hw_params_get_channels": (c_int, [_P, POINTER(c_uint)]),
    "snd_pcm_hw_params_get_period_size": (c_int, [_P, POINTER(uframes), POINTER(c_int)]),
    "snd_pcm_hw_params_get_buffer_size": (c_int, [_P, POINTER(uframes)]),
    "snd_pcm_sw_params_malloc": (c_int, [POINTER(c_void_p)]),
    "snd_pcm_sw_params_free": (None, [_P]),
    "snd_pcm_sw_params_current": (c_int, [_P, _P]),
    "snd_pcm_sw_params_get_boundary": (c_int, [_P, POINTER(uframes)]),
    "snd_pcm_sw_params_set_start_threshold": (c_int, [_P, _P, uframes]),
    "snd_pcm_sw_params_set_stop_threshold": (c_int, [_P, _P, uframes]),
    "snd_pcm_sw_params_set_avail_min": (c_int, [_P, _P, uframes]),
    "snd_pcm_sw_params": (c_int, [_P, _P]),
    "snd_pcm_prepare": (c_int, [_P]),
    "snd_pcm_start": (c_int, [_P]),
    "snd_pcm_drop": (c_int, [_P]),
    "snd_pcm_state": (c_int, [_P]),
    "snd_pcm_avail_update": (sframes, [_P]),
    "snd_pcm_wait": (c_int, [_P, c_int]),
    "snd_pcm_recover": (c_int, [_P, c_int, c_int]),
    "snd_pcm_mmap_begin": (
        c_int, [_P, POINTER(POINTER(ChannelArea)), POINTER(uframes), POINTER(uframes)]),
    "snd_pcm_mmap_commit": (sframes, [_P, uframes, uframes]),
    "snd_pcm_writei": (sframes, [_P, c_void_p, uframes]),
    "snd_pcm_readi": (sframes, [_P, c_void_p, uframes]),
    "snd_strerror": (c_char_p, [c_int]),
    "snd_lib_error_set_handler": (c_int, [c_void_p]),
}
for _name, (_res, _args) in _SIGS.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args


def strerror(rc: int) -> str:
    """libasound's text for a (negative) error code."""
    text = lib.snd_strerror(rc)
    return text.decode(errors="replace") if text else f"error {rc}"


# libasound prints diagnostics ("ALSA lib pcm.c:2666: Unknown PCM x") to stderr; route
# them to the log. The C handler is variadic; the fixed arguments are enough to log.
_ERROR_HANDLER = ctypes.CFUNCTYPE(None, c_char_p, c_int, c_char_p, c_int, c_char_p)


def _on_alsa_lib_error(file: bytes | None, line: int, func: bytes | None, err: int,
                       fmt: bytes | None) -> None:
    log.debug("alsa_lib_message", file=(file or b"").decode(errors="replace"), line=line,
              function=(func or b"").decode(errors="replace"), err=err,
              format=(fmt or b"").decode(errors="replace"))


_handler = _ERROR_HANDLER(_on_alsa_lib_error)
lib.snd_lib_error_set_handler(ctypes.cast(_handler, c_void_p))
