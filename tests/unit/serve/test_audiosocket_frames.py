"""AudioSocket framing: round trips, every malformed case, and fuzzing."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosyvoiced.serve.audiosocket.frames import (
    AUDIO_KINDS,
    MAX_FRAME_BYTES,
    Audio,
    CallId,
    Dtmf,
    Error,
    FrameError,
    FrameParser,
    Hangup,
    Kind,
    frame_samples,
    kind_name,
)


def test_wire_forms_match_the_protocol():
    assert Hangup().encode() == b"\x00\x00\x00"
    cid = uuid.UUID("0123456789abcdef0123456789abcdef")
    assert CallId(cid).encode() == b"\x01\x00\x10" + cid.bytes
    assert Dtmf("5").encode() == b"\x03\x00\x015"
    assert Audio(b"\x01\x00" * 160).encode()[:3] == b"\x10\x01\x40"
    assert Error(2).encode() == b"\xff\x00\x01\x02"


@pytest.mark.parametrize("kind,rate,name", [
    (0x10, 8000, "slin"), (0x11, 12000, "slin12"), (0x12, 16000, "slin16"),
    (0x13, 24000, "slin24"), (0x14, 32000, "slin32"), (0x15, 44100, "slin44"),
    (0x16, 48000, "slin48"), (0x17, 96000, "slin96"), (0x18, 192000, "slin192"),
])
def test_every_asterisk_audio_kind_parses_at_its_rate(kind, rate, name):
    """The numbers of include/asterisk/res_audiosocket.h (Asterisk 20-23, 2025)."""
    n = frame_samples(kind)
    assert n == rate // 50 and kind_name(kind) == name
    wire = bytes([kind]) + (2 * n).to_bytes(2, "big") + b"\x01\x02" * n  # 20 ms
    parser = FrameParser(max_payload_bytes=MAX_FRAME_BYTES)
    (frame,) = parser.feed(wire)
    assert isinstance(frame, Audio) and (frame.kind, frame.rate_hz) == (kind, rate)
    assert frame.encode() == wire and parser.error is None


def test_a_parser_limited_to_slin_refuses_the_wideband_kinds():
    parser = FrameParser(accepted_kinds=frozenset({Kind.UUID, Kind.SLIN}))
    assert parser.feed(Audio(b"\x00\x00", Kind.SLIN16).encode()) == []
    assert parser.error is not None and parser.error.code == "unknown_kind"


frames = st.one_of(
    st.just(Hangup()),
    st.uuids().map(CallId),
    st.sampled_from("0123456789*#ABCD").map(Dtmf),
    st.tuples(st.binary(min_size=1, max_size=400).filter(lambda b: len(b) % 2 == 0),
              st.sampled_from(sorted(AUDIO_KINDS))).map(lambda t: Audio(*t)),
    st.one_of(st.none(), st.integers(0, 255)).map(Error),
)


@given(st.lists(frames, max_size=20), st.data())
def test_any_split_of_a_frame_stream_parses_back(seq, data):
    wire = b"".join(f.encode() for f in seq)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=6)))
    parser = FrameParser()
    out = []
    prev = 0
    for cut in [*cuts, len(wire)]:
        out += parser.feed(wire[prev:cut])
        prev = cut
    assert out == seq and parser.pending_bytes == 0


@pytest.mark.parametrize("wire,code", [
    (b"\x02\x00\x00", "unknown_kind"),
    (b"\x11\x00\x02\x00\x00", "unknown_kind"),  # 16 kHz slin: not accepted unless configured
    (b"\x10\x00\x00", "bad_audio"),            # zero-length audio
    (b"\x10\x00\x03abc", "bad_audio"),         # odd byte count
    (b"\x10\xff\xff", "oversize_frame"),
    (b"\x01\x00\x04abcd", "bad_uuid"),
    (b"\x03\x00\x01x", "bad_dtmf"),
    (b"\x03\x00\x0212", "bad_dtmf"),
])
def test_malformed_frames_are_typed_errors(wire, code):
    parser = FrameParser(accepted_kinds=frozenset({Kind.HANGUP, Kind.UUID, Kind.DTMF,
                                                   Kind.SLIN, Kind.ERROR}))
    assert parser.feed(wire) == []
    assert parser.error is not None and parser.error.code == code
    with pytest.raises(FrameError) as info:
        parser.feed(b"\x00\x00\x00")
    assert info.value.code == code


def test_frames_before_an_error_are_not_lost():
    parser = FrameParser()
    good = Dtmf("1").encode() + Audio(b"\x00\x01").encode()
    assert parser.feed(good + b"\x77\x00\x00") == [Dtmf("1"), Audio(b"\x00\x01")]
    assert parser.error is not None and parser.error.code == "unknown_kind"


def test_incomplete_frame_is_held_back():
    parser = FrameParser()
    assert parser.feed(b"\x10\x01\x40" + b"\x00" * 100) == []
    assert parser.pending_bytes == 103
    assert parser.feed(b"\x00" * 220) == [Audio(b"\x00" * 320)]


@settings(max_examples=300)
@given(st.binary(max_size=2000))
def test_fuzz_parser_never_raises_anything_but_protocol_error(blob):
    parser = FrameParser()
    for f in parser.feed(blob):
        assert isinstance(f, Hangup | CallId | Dtmf | Audio | Error)
    if parser.error is not None:
        assert parser.error.code in {"unknown_kind", "oversize_frame", "bad_audio", "bad_uuid",
                                     "bad_dtmf"}
    else:
        assert parser.pending_bytes < 3 + parser.max_payload_bytes
