"""One error root and one code -> status table.

Every error class of the package derives from `CosyvoicedError`; every `code` a class
defines is either in `serve.errors.STATUS` or deliberately answered with the default;
and the table gives the statuses the HTTP tests (and clients) expect.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import cosyvoiced
from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.serve.audiosocket.server import UnknownCall
from cosyvoiced.serve.devices import DeviceUnavailable, NoPlaybackDevice, UnknownDevice
from cosyvoiced.serve.errors import (
    DEFAULT_STATUS,
    STATUS,
    UNAVAILABLE_BASES,
    UNAVAILABLE_STATUS,
    api_error,
    as_api_error,
    status_for,
    status_of,
)
from cosyvoiced.serve.http.errors import ApiError
from cosyvoiced.serve.streams import Refused
from cosyvoiced.tts.errors import TextTooLong, UnknownVoice
from cosyvoiced.workers.errors import Overloaded, PoolNotRunning, WorkerError, WorkerLost

PACKAGE = Path(cosyvoiced.__file__).parent

AT_DEFAULT = frozenset({
    # the root and bases only their subclasses' codes are raised with
    "cosyvoiced_error", "tts_error", "device_error",
    # bad TTS requests: 400
    "empty_text", "invalid_utf8", "control_characters", "unknown_voice", "invalid_voice_name",
    "unknown_speaker", "unsupported_rate", "unsupported_format", "bad_parameter",
    "no_int8_variant", "bad_ssml", "unsupported_voice", "pauses_too_long", "audio_too_long",
    "unreadable_text",
    # a language the ASR model does not transcribe: 400
    "unsupported_language",
    # never reach an HTTP route today (startup, devices, the worker side, the CLI): were
    # one to, it is a 400 unless listed in STATUS
    "bad_config", "listen_failed", "bad_cpus", "ctl_error", "onnx_error", "codec_bad_input",
    "ring_error", "resample_error", "mel_error", "asr_error", "vad_error",
    "alsa_error", "alsa_device_not_found", "alsa_device_busy", "alsa_unsupported_format",
    "alsa_period_refused", "alsa_device_gone", "alsa_xrun", "alsa_suspended", "worker_protocol",
    "bad_lexicon", "asr_model_files",
})
"""Class codes deliberately answered with DEFAULT_STATUS."""

NOT_EXCEPTIONS = frozenset({
    "cosyvoiced.serve.audiosocket.frames.Error",  # the AudioSocket error frame
    "cosyvoiced.workers.messages.StreamError",  # the worker's error message
})
"""Classes named ...Error that are data, not exceptions."""


def _package_classes() -> dict[str, type]:
    """The daemon's classes by dotted name (not `cosyvoiced.testing`: test support, whose
    fixtures fail the way tests expect)."""
    out: dict[str, type] = {}
    for info in pkgutil.walk_packages(cosyvoiced.__path__, "cosyvoiced."):
        if info.name.startswith("cosyvoiced.testing"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                out[f"{module.__name__}.{name}"] = obj
    return out


@pytest.fixture(scope="module")
def classes() -> dict[str, type]:
    return _package_classes()


def _errors(classes: dict[str, type]) -> dict[str, type[CosyvoicedError]]:
    return {n: c for n, c in classes.items() if issubclass(c, CosyvoicedError)}


def test_every_package_error_derives_from_the_root(classes):
    candidates = {n: c for n, c in classes.items()
                  if issubclass(c, BaseException) or n.endswith("Error")}
    off_root = {n for n, c in candidates.items()
                if not issubclass(c, CosyvoicedError) and n not in NOT_EXCEPTIONS}
    assert sorted(off_root) == []
    assert all(not issubclass(classes[n], BaseException) for n in NOT_EXCEPTIONS
               if n in classes)


def test_every_class_code_has_a_status(classes):
    unplaced = sorted(f"{n}: {c.code}" for n, c in _errors(classes).items()
                      if "code" in vars(c) and c.code not in STATUS
                      and c.code not in AT_DEFAULT and not issubclass(c, UNAVAILABLE_BASES))
    assert unplaced == []
    assert sorted(AT_DEFAULT & STATUS.keys()) == []


def test_the_root_imports_nothing_from_the_package():
    tree = ast.parse((PACKAGE / "errors.py").read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert [m for m in imported if m and m.split(".")[0] == "cosyvoiced"] == []


def test_the_root_carries_a_code_and_its_override():
    assert CosyvoicedError("x").code == "cosyvoiced_error"
    assert CosyvoicedError("x", code="mine").code == "mine"
    assert str(CosyvoicedError("x")) == "x"


@pytest.mark.parametrize("code,status", [
    # tests/unit/serve/test_http_api.py, test_devices.py, tests/e2e: what clients get
    ("empty_text", 400), ("text_too_long", 413), ("unknown_voice", 400),
    ("unsupported_rate", 400), ("unsupported_format", 400), ("bad_parameter", 400),
    ("bad_field", 400), ("missing_field", 400), ("bad_json", 400), ("invalid_utf8", 400),
    ("control_characters", 400), ("unsupported_media_type", 415), ("unsupported_audio", 415),
    ("overloaded", 503), ("draining", 503), ("duplicate_stream", 503),
    ("device_unavailable", 503), ("pool_not_running", 503), ("worker_lost", 503),
    ("unknown_device", 404), ("no_playback_device", 404), ("unknown_call", 404),
    ("unauthorized", 401), ("internal", 500),
])
def test_statuses_are_what_the_routes_answer(code, status):
    assert status_of(code) == status
    err = api_error(code, "why")
    assert (err.status, err.code, str(err)) == (status, code, "why")


@pytest.mark.parametrize("exc,status", [
    (TextTooLong(6000, 5000), 413),
    (UnknownVoice("nobody", []), 400),
    (UnknownDevice("no such device", "usb"), 404),
    (NoPlaybackDevice("none configured"), 404),
    (DeviceUnavailable("failed", "usb"), 503),
    (UnknownCall("no active call 'x'"), 404),
    (Refused("draining", "shutting down"), 503),
    (Refused("duplicate_stream", "already active"), 503),
    (Overloaded("busy"), 503),
    (WorkerLost("gone"), 503),
    (PoolNotRunning("stopped"), 503),
    # a worker reports any code (a TTS one too): still the daemon's trouble, not the client's
    (WorkerError("listen streams run at 8000 or 16000 Hz", code="unsupported_rate"), 503),
    (WorkerError("bad speaker", code="unknown_speaker"), 503),
    (ApiError(418, "teapot", "short and stout"), 418),
])
def test_typed_errors_become_their_status(exc, status):
    assert status_for(exc) == status
    err = as_api_error(exc)
    assert (err.status, err.code, str(err)) == (status, exc.code, str(exc))


def test_the_unavailable_codes_in_the_table_are_503():
    assert UNAVAILABLE_STATUS == 503 and DEFAULT_STATUS == 400
    for code in (Overloaded.code, WorkerLost.code, PoolNotRunning.code):
        assert STATUS[code] == UNAVAILABLE_STATUS


def _literal_statuses() -> list[tuple[str, int, str]]:
    """Every `ApiError(<int>, "<code>", ...)` / `error_response(<int>, "<code>", ...)` left
    in the package, with where it is."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("ApiError", "error_response") and len(node.args) >= 2
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[1], ast.Constant)):
                where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
                out.append((where, node.args[0].value, node.args[1].value))
    return out


def test_literal_statuses_agree_with_the_table():
    """`read_json` (below the table) still spells its statuses out: they must agree."""
    found = _literal_statuses()
    assert found, "read_json's literal statuses moved: update this test"
    assert [f"{w}: {s} {c}" for w, s, c in found if status_of(c) != s] == []
