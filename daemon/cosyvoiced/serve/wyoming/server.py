"""Wyoming server: describe, synthesize (plain and streaming), transcribe, VAD events.

One task per connection and no shared lock, so clients are served in parallel. A
malformed event ends only that connection, after an `error` event with a code.

Streamed text (`synthesize-chunk`) is spoken a sentence at a time as sentence ends
arrive; what waits for one is capped at `tts.max_chars` (`text_too_long`, that stream is
dropped), and each chunk is scanned once, not all the text since the last sentence end.

Bounded per listener: at most `max_connections` clients, and a client that sends no
whole event within `idle_timeout_s` (silent or trickling), or reads nothing that long
while audio waits for it, is closed with a log line.
What the protocol cannot ask for (speed; voice and speaker when a client names none)
comes from `[wyoming]`. A TCP listener beyond loopback is advertised over zeroconf.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np
import structlog
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_write_event
from wyoming.info import Describe, Info
from wyoming.ping import Ping, Pong
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
)
from wyoming.vad import VoiceStarted, VoiceStopped

from cosyvoiced.audio.codec import s16_to_f32
from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.config.addr import WYOMING_FORMS, ListenAddress, parse_allow_from, peer_allowed
from cosyvoiced.config.listeners import WyomingConfig
from cosyvoiced.config.schema import TtsConfig
from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.listen.events import Transcript as TranscriptEvent
from cosyvoiced.listen.events import VoiceStarted as VoiceStartedEvent
from cosyvoiced.listen.events import VoiceStopped as VoiceStoppedEvent
from cosyvoiced.listen.languages import LanguageError, resolve_language, spoken_language
from cosyvoiced.serve.peers import refuse_peer
from cosyvoiced.serve.speech import Listening, Speech, Unavailable
from cosyvoiced.serve.streams import Refused, Streams
from cosyvoiced.serve.wyoming.discovery import Advertisement
from cosyvoiced.serve.wyoming.info import describe
from cosyvoiced.serve.wyoming.text import StreamedText
from cosyvoiced.serve.wyoming.wire import MAX_LINE_BYTES, WyomingProtocolError, read_event
from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.request import SynthesisOptions

log = structlog.get_logger(__name__)

SAMPLES_PER_EVENT = 2048
LISTEN_RATES_HZ = (8000, 16000)
DEFAULT_MAX_CHARS = TtsConfig().max_chars


class ClientError(CosyvoicedError):
    """A well-formed request we cannot serve; the client gets an error event."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class Connection:
    """The state of one Wyoming client."""

    def __init__(self, speech: Speech, streams: Streams, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, name: str, *,
                 max_chars: int = DEFAULT_MAX_CHARS,
                 config: WyomingConfig | None = None) -> None:
        self.speech = speech
        self.streams = streams
        self.reader = reader
        self.writer = writer
        self.name = name
        self.max_chars = max_chars
        self.config = config or WyomingConfig()
        """`[wyoming]` as it was when the client connected (defaults, idle timeout)."""
        self._stream_text: StreamedText | None = None
        self._stream_options = SynthesisOptions(format="s16le")
        self._listening: Listening | None = None
        self._resampler: StreamResampler | None = None
        self._forward: asyncio.Task[None] | None = None
        self._language = ""
        """The language of the last `transcribe` event ("": the model's choice), for
        every transcription after it on this connection."""

    async def write(self, event: Event) -> None:
        """Send one event; a client that reads nothing for `idle_timeout_s` while we
        have audio for it is dropped like one that sends nothing. (`asyncio.timeout`, not
        `wait_for`: on Python 3.11 `wait_for` swallows a cancel that comes as the write
        ends, and the event forwarder, cancelled at `audio-stop`, then held the
        transcript back until the client went away.)"""
        try:
            async with asyncio.timeout(self.config.idle_timeout_s):
                await async_write_event(event, self.writer)
        except TimeoutError:
            log.info("wyoming_write_timeout", client=self.name,
                     timeout_s=self.config.idle_timeout_s)
            self.writer.transport.abort()
            raise ConnectionResetError("client stopped reading") from None

    async def _next_event(self) -> Event | None:
        """The next whole event within `idle_timeout_s`, else the connection ends."""
        try:
            return await asyncio.wait_for(read_event(self.reader), self.config.idle_timeout_s)
        except TimeoutError:
            log.info("wyoming_idle_timeout", client=self.name,
                     timeout_s=self.config.idle_timeout_s)
            with contextlib.suppress(ConnectionError):
                await self.write(Error(text=f"no whole event within "
                                            f"{self.config.idle_timeout_s:g} s",
                                       code="idle_timeout").event())
            return None

    async def run(self) -> None:
        try:
            while (event := await self._next_event()) is not None:
                try:
                    await self.handle(event)
                except (ClientError, TtsError, Refused) as exc:
                    await self.write(Error(text=str(exc), code=exc.code).event())
                except Unavailable as exc:
                    await self.write(Error(text=str(exc), code=exc.code).event())
        except WyomingProtocolError as exc:
            log.warning("wyoming_protocol_error", client=self.name, code=exc.code,
                        error=str(exc))
            with contextlib.suppress(ConnectionError):
                await self.write(Error(text=str(exc), code=exc.code).event())
        except ConnectionError:
            log.info("wyoming_client_gone", client=self.name)
        finally:
            await self._end_listening(send=False)
            self.writer.close()

    async def handle(self, event: Event) -> None:
        if Describe.is_type(event.type):
            await self.write(self.info().event())
        elif Ping.is_type(event.type):
            await self.write(Pong(text=event.data.get("text")).event())
        elif Synthesize.is_type(event.type):
            if self._stream_text is None:  # ignored while streaming (sent for old servers)
                msg = _parse(Synthesize, event)
                await self.speak(msg.text, self._options(msg.voice))
        elif SynthesizeStart.is_type(event.type):
            msg = _parse(SynthesizeStart, event)
            self._stream_text = StreamedText(self.max_chars)
            self._stream_options = self._options(msg.voice)
        elif SynthesizeChunk.is_type(event.type):
            await self.stream_chunk(_parse(SynthesizeChunk, event).text)
        elif SynthesizeStop.is_type(event.type):
            await self.stream_stop()
        elif Transcribe.is_type(event.type):
            self.transcribe(_parse(Transcribe, event))  # one model: its name is not read
        elif AudioStart.is_type(event.type):
            await self.audio_start(_parse(AudioStart, event))
        elif AudioChunk.is_type(event.type):
            self.audio_chunk(_parse(AudioChunk, event))
        elif AudioStop.is_type(event.type):
            await self.audio_stop()
        else:
            log.debug("wyoming_event_ignored", client=self.name, type=event.type)

    def _options(self, voice: Any) -> SynthesisOptions:
        """The client's voice and speaker, else `[wyoming]`'s; `[wyoming] speed` always."""
        name = getattr(voice, "name", None) or self.config.voice or None
        speaker: int | str | None = getattr(voice, "speaker", None)
        if not speaker and not getattr(voice, "name", None) and self.config.speaker:
            speaker = self.config.speaker
            speaker = int(speaker) if speaker.isdecimal() else speaker
        speed = self.config.speed
        return SynthesisOptions(voice=name, speaker=speaker or None, format="s16le",
                                length_scale=None if speed == 1.0 else 1.0 / speed)

    def info(self) -> Info:
        return describe(self.speech)

    # --- synthesis -----------------------------------------------------------------

    async def speak(self, text: str, options: SynthesisOptions, *, stop: bool = True) -> None:
        info = self.streams.open("wyoming")
        try:
            synthesis = await self.speech.synthesize(text, options, info.id)
            started = False
            async for chunk in synthesis:
                if not started:
                    await self.write(AudioStart(rate=chunk.rate_hz, width=2, channels=1).event())
                    started = True
                data = chunk.data
                step = SAMPLES_PER_EVENT * 2
                for i in range(0, len(data), step):
                    await self.write(AudioChunk(rate=chunk.rate_hz, width=2, channels=1,
                                                audio=data[i:i + step]).event())
            if stop and started:
                await self.write(AudioStop().event())
        finally:
            self.streams.close(info.id)

    async def stream_chunk(self, text: str) -> None:
        if self._stream_text is None:
            raise ClientError("no_stream", "synthesize-chunk before synthesize-start")
        for sentence in self._stream_text.add(text):
            if sentence.strip():
                await self.speak(sentence, self._stream_options)

    async def stream_stop(self) -> None:
        if self._stream_text is None:
            raise ClientError("no_stream", "synthesize-stop before synthesize-start")
        rest = self._stream_text.rest()
        self._stream_text = None
        if rest.strip():
            await self.speak(rest, self._stream_options)
        await self.write(SynthesizeStopped().event())

    # --- transcription -------------------------------------------------------------

    def transcribe(self, msg: Transcribe) -> None:
        """The language of what comes next (ClientError for one the model lacks)."""
        if msg.language:
            try:
                self._language = resolve_language(msg.language, self.speech.asr_languages())
            except LanguageError as exc:
                raise ClientError(exc.code, str(exc)) from None

    async def audio_start(self, fmt: AudioStart) -> None:
        if fmt.width != 2 or fmt.channels != 1:
            raise ClientError("bad_audio_format",
                              f"need 16-bit mono audio, got width {fmt.width} "
                              f"channels {fmt.channels}")
        await self._end_listening(send=False)
        rate = fmt.rate if fmt.rate in LISTEN_RATES_HZ else 16000
        self._resampler = StreamResampler(fmt.rate, rate) if rate != fmt.rate else None
        info = self.streams.open("wyoming")
        try:
            self._listening = await self.speech.listen(rate, info.id, language=self._language)
        except BaseException:
            self.streams.close(info.id)
            raise
        self._listen_id = info.id
        self._forward = asyncio.create_task(self._forward_events(self._listening))

    def audio_chunk(self, chunk: AudioChunk) -> None:
        if self._listening is None:
            return  # audio that is not for us (e.g. before transcribe): ignore
        if chunk.width != 2 or chunk.channels != 1 or len(chunk.audio) % 2:
            raise ClientError("bad_audio_format", "audio-chunk must be 16-bit mono")
        pcm = np.frombuffer(chunk.audio, dtype=np.int16)
        samples = s16_to_f32(pcm, np.empty(pcm.shape, dtype=np.float32))
        if self._resampler is not None:
            samples = self._resampler.process(samples)
        self._listening.feed(samples)

    async def audio_stop(self) -> None:
        if self._listening is None:
            return
        await self._end_listening(send=True)

    async def _forward_events(self, listening: Listening) -> None:
        async for ev in listening.events():
            if isinstance(ev, VoiceStartedEvent):
                await self.write(VoiceStarted(timestamp=ev.start_ms).event())
            elif isinstance(ev, VoiceStoppedEvent):
                await self.write(VoiceStopped(timestamp=ev.end_ms).event())

    async def _end_listening(self, *, send: bool) -> None:
        listening, self._listening = self._listening, None
        if listening is None:
            return
        try:
            if self._resampler is not None:
                listening.feed(self._resampler.flush())
            finals = await listening.close()
        finally:
            if self._forward:
                self._forward.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._forward
            self.streams.close(self._listen_id)
        if send:
            said = [t for t in finals if isinstance(t, TranscriptEvent) and t.text.strip()]
            language = spoken_language(said, self._language, self.speech.asr_languages())
            await self.write(Transcript(text=" ".join(t.text.strip() for t in said),
                                        language=language or None).event())


def _parse(cls: Any, event: Event) -> Any:
    try:
        return cls.from_event(event)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ClientError("bad_event", f"malformed {event.type}: {exc!r}") from None


class WyomingServer:
    def __init__(self, speech: Speech, streams: Streams, config: WyomingConfig, *,
                 max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.speech = speech
        self.streams = streams
        self.config = config
        """`[wyoming]`; the live keys are replaced on reload (read per connection)."""
        self.listen = config.listen
        self.allow = parse_allow_from(config.allow_from)
        """Who may connect over TCP (empty: loopback only; checked with the config)."""
        self.max_chars = max_chars
        """`tts.max_chars`: most streamed text waiting for a sentence end."""
        self._server: asyncio.base_events.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()
        self.bound = ""
        self.advertisement: Advertisement | None = None

    async def start(self) -> None:
        addr = ListenAddress.parse(self.listen, WYOMING_FORMS)
        if addr.kind == "unix":
            self._server = await asyncio.start_unix_server(self._client, addr.path,
                                                           limit=MAX_LINE_BYTES)
            self.bound = self.listen
        else:
            self._server = await asyncio.start_server(self._client, addr.host, addr.port,
                                                      limit=MAX_LINE_BYTES)
            real = self._server.sockets[0].getsockname()[1]
            self.bound = f"tcp://{addr.bracketed_host}:{real}"
            if self.config.zeroconf and not addr.loopback:
                self.advertisement = Advertisement(addr.host, real, self.config.zeroconf_name)
                try:
                    await self.advertisement.start()
                except (OSError, ValueError) as exc:  # no multicast here: serve anyway
                    log.warning("zeroconf_failed", error=str(exc))
                    await self.advertisement.close()
                    self.advertisement = None
        log.info("wyoming_listening", listen=self.bound)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        if not peer_allowed(peername, self.allow):
            refuse_peer(writer, "wyoming", peername)
            return
        peer = peername or "unix"
        config = self.config
        if len(self._clients) >= config.max_connections:
            log.warning("wyoming_refused", client=str(peer), reason="max_connections",
                        max_connections=config.max_connections)
            with contextlib.suppress(ConnectionError):
                await async_write_event(Error(text=f"at the max_connections cap "
                                                   f"({config.max_connections})",
                                              code="overloaded").event(), writer)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            await Connection(self.speech, self.streams, reader, writer, str(peer),
                             max_chars=self.max_chars, config=config).run()
        except asyncio.CancelledError:
            pass  # server stopping: end quietly (asyncio logs a cancelled client task)
        finally:
            self._clients.discard(task)

    async def stop(self) -> None:
        if self.advertisement is not None:
            await self.advertisement.close()
            self.advertisement = None
        if self._server:
            self._server.close()
            for task in list(self._clients):
                task.cancel()
            await asyncio.gather(*self._clients, return_exceptions=True)
            await self._server.wait_closed()
