"""A small fake of the `Speech` interface for protocol tests (the real one runs e2e)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np

from cosyvoiced.listen.events import Transcript, VoiceStarted, VoiceStopped, Word
from cosyvoiced.serve.speech import ListenEvent, Overloaded, VoiceMeta
from cosyvoiced.tts.errors import AudioTooLong, UnknownVoice
from cosyvoiced.tts.request import AudioChunk, SynthesisOptions, WordTime, check_text


class FakeSynthesis:
    """One chunk per word: 0.1 s of a level per word, s16le at the rate asked (22050 Hz,
    the voice's own, when none is). With `words`, each chunk carries its word, timed over
    its first 80 ms; a word `FAIL` fails the synthesis there (an error mid-way)."""

    def __init__(self, text: str, first_audio_s: float = 0.0, rate_hz: int | None = None,
                 words: bool = False) -> None:
        self.rate_hz = rate_hz or 22050
        self.text = text
        self.timed = words
        self.words = text.split()
        self.cancelled = False
        self.first_audio_s = first_audio_s

    async def __aiter__(self) -> AsyncIterator[AudioChunk]:
        for i, word in enumerate(self.words):
            if self.cancelled:
                return
            await asyncio.sleep(self.first_audio_s if i == 0 else 0)
            if word == "FAIL":
                raise AudioTooLong(1e9, 1.0)
            audio = np.full(self.rate_hz // 10, 0.25, dtype=np.float32)
            data = (audio * 32767).astype("<i2").tobytes()
            at = len(" ".join(self.words[:i])) + (1 if i else 0)
            said = (WordTime(word, at, at + len(word), i / 10, i / 10 + 0.08),) \
                if self.timed else ()
            yield AudioChunk(audio, data, self.rate_hz, "s16le", i, word,
                             i == len(self.words) - 1, words=said)

    def cancel(self) -> None:
        self.cancelled = True


class FakeListening:
    """Speech is any sample above 0.1; each run of speech is one utterance whose
    'transcript' is its length in samples."""

    def __init__(self, rate_hz: int) -> None:
        self.rate_hz = rate_hz
        self.dropped = 0
        self.queue: asyncio.Queue[ListenEvent] = asyncio.Queue()
        self.pos = 0
        self.start: int | None = None
        self.transcripts: list[Transcript] = []
        self.language = ""
        """The language it was opened in ("": none asked)."""
        self.words = False
        """Opened asking for word times: each transcript then has one word per 0.1 s of
        its speech, in order, inside it."""

    def _ms(self, n: int) -> int:
        return n * 1000 // self.rate_hz

    def feed(self, samples: np.ndarray) -> None:
        for s in samples:
            if s > 0.1 and self.start is None:
                self.start = self.pos
                self.queue.put_nowait(VoiceStarted(self._ms(self.pos)))
            elif s <= 0.1 and self.start is not None:
                self._end()
            self.pos += 1

    def _end(self) -> None:
        assert self.start is not None
        self.queue.put_nowait(VoiceStopped(self._ms(self.start), self._ms(self.pos)))
        start_s, end_s = self.start / self.rate_hz, self.pos / self.rate_hz
        n = max(1, int((end_s - start_s) * 10))
        step = (end_s - start_s) / n
        words = tuple(Word(f"w{i}", round(start_s + i * step, 3),
                           round(start_s + (i + 1) * step, 3), 0.9) for i in range(n))
        t = Transcript(f"{self.pos - self.start} samples", self._ms(self.start),
                       self._ms(self.pos), 1.0, 0.1, words=words if self.words else None)
        self.transcripts.append(t)
        self.queue.put_nowait(t)  # as the real one: each transcript is also an event
        self.start = None

    async def events(self) -> AsyncIterator[ListenEvent]:
        while True:
            yield await self.queue.get()

    async def close(self) -> list[Transcript]:
        if self.start is not None:
            self._end()
        return self.transcripts  # every transcript of the stream, as the real one does


class FakeSpeech:
    def __init__(self, *, capacity: int = 100, first_audio_s: float = 0.0,
                 at_rate_asked: bool = False) -> None:
        self.capacity = capacity
        self.at_rate_asked = at_rate_asked
        """Synthesize at `options.rate_hz` as the real one does (off: always 22050 Hz,
        which protocol tests count frames by)."""
        self.first_audio_s = first_audio_s
        self.active = 0
        self.requests: list[tuple[str, SynthesisOptions]] = []
        self.listens: list[FakeListening] = []

    def voices(self) -> list[VoiceMeta]:
        return [VoiceMeta("en_US-joe-medium", "en_US", 22050, (), "medium")]

    def asr_model(self) -> str | None:
        return "whisper-tiny.en"

    def asr_languages(self) -> tuple[str, ...]:
        return ("en",) if self.asr_model() else ()

    async def synthesize(self, text: str | bytes, options: SynthesisOptions,
                         stream_id: str) -> FakeSynthesis:
        options.check()
        text = check_text(text, 5000)
        if options.voice not in (None, "en_US-joe-medium"):
            raise UnknownVoice(options.voice, ["en_US-joe-medium"])
        if self.active >= self.capacity:
            raise Overloaded("no capacity left")
        self.requests.append((text, options))
        return FakeSynthesis(text, self.first_audio_s,
                             options.rate_hz if self.at_rate_asked else None, options.words)

    async def listen(self, rate_hz: int, stream_id: str,
                     backlog_s: float | None = 30.0, language: str = "",
                     words: bool = False) -> FakeListening:
        if self.active >= self.capacity:
            raise Overloaded("no capacity left")
        lis = FakeListening(rate_hz)
        lis.language = language
        lis.words = words
        self.listens.append(lis)
        return lis
