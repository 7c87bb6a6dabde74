"""Streaming encode and any-container decode through PyAV, on real FFmpeg codecs."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest

from cosyvoiced.audio.container import ENCODINGS, DecodeError, StreamEncoder, decode

RATE = 24000


def tone(seconds: float, rate: int = RATE, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.argmax(spectrum) * rate / x.size)


def make_file(x: np.ndarray, rate: int, fmt: str, codec: str, out_rate: int,
              layout: str = "mono") -> bytes:
    """`x` written the way a browser or phone would hand it over."""
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as c:
        s = c.add_stream(codec, rate=out_rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(x.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = rate
        for f in [frame, None]:
            for p in s.encode(f):
                c.mux(p)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", sorted(ENCODINGS))
def test_each_format_streams_from_the_first_chunk_and_decodes_back(fmt):
    x = tone(2.25)
    enc = StreamEncoder(fmt, RATE)
    pieces = [enc.encode(x[:6000])]  # a 0.25 s first chunk, as synthesis sends
    assert len(pieces[0]) > 0, "no bytes left with the first chunk"
    pieces += [enc.encode(x[i:i + RATE]) for i in range(6000, x.size, RATE)]
    pieces.append(enc.finish())
    assert all(pieces[1:-1])
    out = decode(b"".join(pieces), 60.0, 16000)
    assert abs(out.size / 16000 - 2.25) < 0.12  # the codec's priming/padding at most
    assert peak_hz(out[1600:-1600], 16000) == pytest.approx(440, abs=5)
    assert np.sqrt(np.mean(out[1600:-1600] ** 2)) == pytest.approx(0.3 / np.sqrt(2), rel=0.1)


def test_an_abandoned_encoder_closes_and_a_bad_rate_is_refused():
    enc = StreamEncoder("opus", RATE)
    enc.encode(tone(0.5))
    enc.close()
    enc.close()
    with pytest.raises(ValueError, match="22050"):
        StreamEncoder("opus", 22050)


@pytest.mark.parametrize("fmt,codec,rate,layout", [
    ("webm", "libopus", 48000, "mono"), ("ogg", "libopus", 48000, "stereo"),
    ("ipod", "aac", 44100, "stereo"), ("mp3", "libmp3lame", 44100, "mono"),
    ("wav", "pcm_s16le", 8000, "mono"), ("flac", "flac", 16000, "mono"),
])
def test_uploads_of_any_container_decode_to_mono_at_the_rate_asked(fmt, codec, rate, layout):
    x = tone(1.5, 8000, 300.0)
    data = make_file(x, 8000, fmt, codec, rate, layout)
    out = decode(data, 60.0, 16000)
    assert out.dtype == np.float32 and out.ndim == 1
    assert abs(out.size / 16000 - 1.5) < 0.12
    assert peak_hz(out[1600:-1600], 16000) == pytest.approx(300, abs=5)


@pytest.mark.parametrize("data", [
    b"", b"hello, not audio",
    b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n",
    b"ffconcat version 1.0\nfile /etc/passwd\n",
])
def test_what_is_no_audio_file_is_refused_and_opens_nothing_else(data):
    with pytest.raises(DecodeError) as err:
        decode(data, 60.0, 16000)
    assert err.value.code == "unsupported_audio"


def test_a_file_longer_than_the_cap_is_refused_while_decoding():
    data = make_file(tone(3.0, 8000), 8000, "mp3", "libmp3lame", 16000)
    with pytest.raises(DecodeError) as err:
        decode(data, 1.0, 16000)
    assert err.value.code == "upload_too_long"


def test_a_truncated_upload_keeps_what_decoded():
    data = make_file(tone(2.0, 8000), 8000, "webm", "libopus", 48000)
    out = decode(data[: len(data) * 2 // 3], 60.0, 16000)
    assert 0.5 < out.size / 16000 < 2.0


def test_close_from_another_thread_mid_encode_never_waits_and_still_closes():
    """A client gone while its chunk is being encoded on a worker thread: the event loop's
    close must neither block nor free the encoder under the thread's feet."""
    import threading
    import time

    enc = StreamEncoder("mp3", RATE)
    big = tone(20.0)
    t = threading.Thread(target=enc.encode, args=(big,))
    t.start()
    time.sleep(0.005)
    t0 = time.perf_counter()
    enc.close()
    assert time.perf_counter() - t0 < 0.1  # encoding the 20 s takes ~0.6 s
    t.join()
    assert enc._done and enc.encode(big[:100]) == b"" and enc.finish() == b""
