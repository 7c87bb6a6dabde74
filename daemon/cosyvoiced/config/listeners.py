"""The listeners' config sections: HTTP API, AudioSocket, Wyoming, OpenAI names, agent.

Documented like the rest of the schema (`schema.py`): each field by the string under it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cosyvoiced.config.fields import opt


@dataclass(frozen=True, kw_only=True)
class ApiConfig:
    listen: tuple[str, ...] = opt(())
    """Extra listeners besides the control socket: "tcp://HOST:PORT" or "unix:PATH"."""
    token: str = opt("")
    """Bearer token; required when a listener is not on loopback."""
    request_timeout_s: float = opt(15.0, min=0.1, max=3600.0)
    """A client must send its request line and headers, and a JSON body, within this
    (a connection that sends nothing, or trickles, is closed): one slow client holds no
    connection for long. Uploads to /v1/transcribe have to keep moving at this pace."""
    max_connections: int = opt(256, min=1, max=100000)
    """Open connections each HTTP listener (the control socket and each of `listen`)
    holds at once; past it a new connection gets 503 overloaded and is closed unread. Each
    listener counts its own, so a flood on one leaves the others (and calls) alone."""
    console: bool = opt(True, live=True)
    """Serve the web console at `/` on each listener: speak with read-along words, listen
    (microphone or file to transcript), live calls, and the daemon's status. The page
    itself is open; every API call it makes needs `token` as any client's does. false: `/`
    and `/console/*` are 404."""


@dataclass(frozen=True, kw_only=True)
class AudioSocketConfig:
    enabled: bool = opt(False)
    """Accept Asterisk AudioSocket calls."""
    listen: str = opt("127.0.0.1:9092")
    """HOST:PORT to listen on."""
    allow_from: tuple[str, ...] = opt((), live=True)
    """Peers allowed to connect (addresses or CIDR networks, e.g. ["10.1.2.0/24"]): the
    protocol has no authentication. Empty: loopback only; a `listen` address beyond
    loopback needs it."""
    greeting: str = opt("", live=True)
    """Spoken to each caller when the call starts; empty: none."""
    voice: str = opt("", live=True)
    """Voice for calls; empty: tts.voice."""
    barge_in: bool = opt(True, live=True)
    """Stop speaking when the caller starts talking."""
    barge_in_min_ms: int = opt(0, min=0, max=5000, live=True)
    """Caller speech needed (beyond the VAD's own start_ms) before barge-in."""
    playout_ms: int = opt(60, min=20, max=1000, live=True)
    """Synthesized audio buffered ahead of the 20 ms send clock (flushed on barge-in)."""
    first_frame_timeout_s: float = opt(5.0, min=0.1, max=60.0, live=True)
    """A connection that sends no UUID frame within this is closed."""
    peer_timeout_s: float = opt(10.0, min=0.5, max=3600.0, live=True)
    """A call whose peer sends nothing for this long is ended."""
    max_send_buffer_bytes: int = opt(64_000, min=4096, max=10_000_000)
    """A peer that does not read what we send (unsent bytes above about this: the
    kernel's send buffer for the call) is ended. For slin at 8 kHz (64000: 4 s); a call
    in a wider format gets as many seconds (x its rate / 8000)."""
    rt_priority: int = opt(20, min=0, max=90)
    """SCHED_FIFO priority asked for the 20 ms call clock thread only; 0: do not ask; at
    most 90, the unit's LimitRTPRIO."""
    comfort_silence: bool = opt(True, live=True)
    """Send 20 ms frames of silence (in the caller's format) while there is nothing to
    say, so the call's RTP keeps flowing: Asterisk does not fill gaps itself."""
    first_frame_wait_ms: int = opt(1000, min=0, max=5000, live=True)
    """How long a new call waits, sending nothing, for the caller's first audio frame,
    whose kind sets the format the call is answered in (slin 8 kHz up to slin192;
    Asterisk sends it ~0.3 s after the call's UUID). None by then: the call begins in
    slin (comfort silence, the greeting), and switches to the format of that first frame
    whenever it comes; only a change after it is a protocol error."""


@dataclass(frozen=True, kw_only=True)
class WyomingConfig:
    enabled: bool = opt(False)
    """Serve the Wyoming protocol."""
    listen: str = opt("tcp://127.0.0.1:10200")
    """tcp://HOST:PORT or unix:PATH."""
    allow_from: tuple[str, ...] = opt((), live=True)
    """Peers allowed to connect over TCP (addresses or CIDR networks): the protocol has no
    authentication. Empty: loopback only; a `listen` address beyond loopback needs it."""
    zeroconf: bool = opt(True)
    """Advertise the listener over mDNS as `_wyoming._tcp` (Home Assistant finds it without
    a typed host and port). Only for a TCP `listen` beyond loopback; on a wildcard address
    every non-loopback address of the host is advertised."""
    zeroconf_name: str = opt("")
    """The advertised instance name; "": "cosyvoiced on HOSTNAME"."""
    voice: str = opt("", live=True)
    """Voice for a `synthesize` that names none (Wyoming clients often send none); "":
    `tts.voice`."""
    speaker: str = opt("", live=True)
    """Speaker (name or id) of a multi-speaker voice for a `synthesize` that names none."""
    speed: float = opt(1.0, min=0.25, max=4.0, live=True)
    """Speaking rate of all Wyoming speech (the protocol cannot ask for one): 1.0 the
    voice's own, 2.0 twice as fast."""
    idle_timeout_s: float = opt(60.0, min=1.0, max=3600.0, live=True)
    """A client that sends no whole event within this long (silent, or trickling bytes)
    is closed (logged `wyoming_idle_timeout`); time spent answering does not count. One
    that reads nothing this long while audio waits for it is dropped too
    (`wyoming_write_timeout`), freeing its stream."""
    max_connections: int = opt(64, min=1, max=10_000, live=True)
    """Wyoming clients connected at once; one more gets an `error` event (`overloaded`)
    and is closed. Each transcription or synthesis also takes a stream slot."""


@dataclass(frozen=True, kw_only=True)
class OpenAIVoices:
    alloy: str = opt("")
    """The voice OpenAI's `alloy` speaks with; empty: tts.voice."""
    ash: str = opt("")
    """The voice OpenAI's `ash` speaks with; empty: tts.voice."""
    ballad: str = opt("")
    """The voice OpenAI's `ballad` speaks with; empty: tts.voice."""
    coral: str = opt("")
    """The voice OpenAI's `coral` speaks with; empty: tts.voice."""
    echo: str = opt("")
    """The voice OpenAI's `echo` speaks with; empty: tts.voice."""
    fable: str = opt("")
    """The voice OpenAI's `fable` speaks with; empty: tts.voice."""
    nova: str = opt("")
    """The voice OpenAI's `nova` speaks with; empty: tts.voice."""
    onyx: str = opt("")
    """The voice OpenAI's `onyx` speaks with; empty: tts.voice."""
    sage: str = opt("")
    """The voice OpenAI's `sage` speaks with; empty: tts.voice."""
    shimmer: str = opt("")
    """The voice OpenAI's `shimmer` speaks with; empty: tts.voice."""
    verse: str = opt("")
    """The voice OpenAI's `verse` speaks with; empty: tts.voice."""
    marin: str = opt("")
    """The voice OpenAI's `marin` speaks with; empty: tts.voice."""
    cedar: str = opt("")
    """The voice OpenAI's `cedar` speaks with; empty: tts.voice."""


@dataclass(frozen=True, kw_only=True)
class OpenAIConfig:
    voices: OpenAIVoices = opt(OpenAIVoices(), live=True)
    """OpenAI's voice names mapped to voices here, e.g. `voices = {alloy =
    "en_US-joe-medium", nova = "en_US-amy-medium"}`; a name left out speaks with
    tts.voice."""


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    listen: str = opt("")
    """HOST:PORT of the HAProxy agent-check listener (one line per connection: `up ready
    100% maxconn:32` or `0%` when full, `drain`, `maint` or `down`); empty: off."""
    allow_from: tuple[str, ...] = opt((), live=True)
    """Balancers allowed to connect (addresses or CIDR networks). Empty: loopback only; a
    `listen` address beyond loopback needs it."""
    max_connections: int = opt(16, min=1, max=1024, live=True)
    """Agent connections served at once (each is answered and closed at once); more are
    closed unanswered."""
    drain_grace_s: float = opt(2.0, min=0.0, max=60.0, live=True)
    """On SIGTERM, how long the daemon says `drain` while still taking new calls before it
    refuses them: at least HAProxy's `agent-inter`, so no call routed here just before the
    balancer heard `drain` is refused. Counted within service.drain_timeout_s."""
