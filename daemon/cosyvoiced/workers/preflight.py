"""Before the workers start: the models they would fail to load, each with one reason."""

from __future__ import annotations

from pathlib import Path

from cosyvoiced.config import Config
from cosyvoiced.listen.asr import AsrError, bundled_model_dir
from cosyvoiced.listen.languages import LanguageError, model_languages, resolve_language
from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.voice.catalog import find_voice

WHISPER_FILES = ("model.bin", "config.json", "tokenizer.json")
"""What `WhisperAsr` loads from a model directory."""


def model_problems(config: Config) -> list[tuple[str, str]]:
    """(key, one-line reason) for each model the workers would fail to load: the default
    voice (`tts.voice`, in `tts.voices_dirs` or bundled) and, with ASR on, Whisper
    (`asr.model_dir`, or the bundled model, and `asr.language` among its languages)."""
    out: list[tuple[str, str]] = []
    try:
        voice = find_voice(config.tts.voice, config.tts.voices_dirs)
    except TtsError as exc:
        out.append(("tts.voice", str(exc)))
    else:
        bad = [why for why in map(_unreadable, (voice.model_path, voice.config_path)) if why]
        if bad:
            out.append(("tts.voice", f"voice {voice.name!r} cannot be read: {bad[0]}"))
    if config.asr.enabled:
        try:
            model_dir = Path(config.asr.model_dir) if config.asr.model_dir else bundled_model_dir()
        except AsrError as exc:
            out.append(("asr.model_dir", str(exc)))
        else:
            bad = [why for why in (_unreadable(model_dir / n) for n in WHISPER_FILES) if why]
            if bad:
                out.append(("asr.model_dir", f"no Whisper model in {str(model_dir)!r}: "
                                             + "; ".join(bad)))
            else:
                try:
                    langs = model_languages(model_dir)  # what the servers will advertise
                except LanguageError as exc:
                    out.append(("asr.model_dir", str(exc)))
                else:
                    try:
                        resolve_language(config.asr.language, langs)
                    except LanguageError as exc:
                        out.append(("asr.language", str(exc)))
    return out


def _unreadable(path: Path) -> str | None:
    """Why `path` cannot be read as a file, or None."""
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        return f"{path.name}: {exc.strerror or exc}"
    return None
