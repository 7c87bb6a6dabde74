"""What a Wyoming `describe` is answered with: the voices, and the ASR model with the
languages it transcribes (every language of a multilingual Whisper, `en` of tiny.en)."""

from __future__ import annotations

from typing import Any

from wyoming.info import (
    AsrModel,
    AsrProgram,
    Attribution,
    Info,
    TtsProgram,
    TtsVoice,
    TtsVoiceSpeaker,
)

from cosyvoiced import __version__
from cosyvoiced.serve.speech import Speech

ATTRIBUTION = Attribution(name="cosyvoiced", url="file:/usr/share/doc/cosyvoiced/README.md")


def describe(speech: Speech) -> Info:
    """The `info` event's programs: TTS voices always, ASR while listening is on."""
    voices = [TtsVoice(name=v.name, description=f"Piper {v.name}", attribution=ATTRIBUTION,
                       installed=True, version=None, languages=[v.language],
                       speakers=[TtsVoiceSpeaker(s) for s in v.speakers] or None)
              for v in speech.voices()]
    programs: dict[str, Any] = {"tts": [TtsProgram(
        name="cosyvoiced-tts", description="Piper voices on ONNX Runtime",
        attribution=ATTRIBUTION, installed=True, version=__version__, voices=voices,
        supports_synthesize_streaming=True)]}
    model = speech.asr_model()
    if model:
        programs["asr"] = [AsrProgram(
            name="cosyvoiced-asr", description="Whisper on CTranslate2 with Silero VAD",
            attribution=ATTRIBUTION, installed=True, version=__version__,
            models=[AsrModel(name=model, description=model, attribution=ATTRIBUTION,
                             installed=True, version=None,
                             languages=list(speech.asr_languages()))])]
    return Info(**programs)
