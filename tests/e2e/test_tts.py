"""End to end with the real bundled voice (en_US-joe-medium) on ONNX Runtime."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import wave
from typing import Any

import numpy as np
import pytest
import structlog.testing

from cosyvoiced.audio.codec import mulaw_decode
from cosyvoiced.audio.resample import SUPPORTED_RATES_HZ
from cosyvoiced.config.schema import TtsConfig
from cosyvoiced.runtime.onnx import cpu_flags, file_sha256, int8_dot
from cosyvoiced.runtime.openvino import bf16_flag
from cosyvoiced.tts import errors
from cosyvoiced.tts.engine import TtsEngine
from cosyvoiced.tts.request import SynthesisOptions
from cosyvoiced.tts.voice.catalog import BUNDLED_VOICE, bundled_voice, discover, kept_int8

SENTENCE = ("Thank you for calling, your claim was approved today, and the payment "
            "will arrive in five to seven business days.")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


# FP32, and where this CPU offers another engine variant, the one `auto` picks (a bf16
# vocoder and flow): precision-dependent assertions show up on every kind of machine.
VARIANTS = ["fp32", "auto"] if bf16_flag(cpu_flags()) else ["fp32"]


@pytest.fixture(scope="module", params=VARIANTS)
def engine(cache_dir, request):
    # the engine itself is measured here (prompt cache: its own tests below)
    return TtsEngine(TtsConfig(precision="fp32", vocoder=request.param, flow=request.param,
                               max_chars=500, cache_mb=0), cache_dir=cache_dir)


def speak(engine, text, **kw):
    chunks = list(engine.synthesize(text, SynthesisOptions(**kw)))
    return chunks, np.concatenate([c.audio for c in chunks])


def test_audio_is_speech_of_plausible_length(engine):
    chunks, audio = speak(engine, SENTENCE, format="float32")
    words = len(SENTENCE.split())
    seconds = audio.size / chunks[0].rate_hz
    assert words / 4.5 < seconds < words / 1.5  # 1.5 to 4.5 words per second
    rms = float(np.sqrt(np.mean(audio ** 2)))
    assert 0.02 < rms < 0.5
    assert np.abs(audio).max() <= 1.0
    # Speech is spread over the whole clip, not a blip followed by silence.
    quarters = np.array_split(audio, 4)
    assert all(np.sqrt(np.mean(q ** 2)) > 0.01 for q in quarters)
    assert chunks[-1].is_last and not any(c.is_last for c in chunks[:-1])
    assert [c.index for c in chunks] == list(range(len(chunks)))


@pytest.mark.parametrize("rate_hz", SUPPORTED_RATES_HZ)
def test_each_output_rate(engine, rate_hz):
    chunks, audio = speak(engine, "Your balance is $49.99.", rate_hz=rate_hz, format="s16le",
                          noise_scale=0.0, noise_w_scale=0.0)
    assert {c.rate_hz for c in chunks} == {rate_hz}
    assert all(len(c.data) == 2 * c.samples for c in chunks)
    base, _ = speak(engine, "Your balance is $49.99.", format="float32", noise_scale=0.0,
                    noise_w_scale=0.0)
    native_s = sum(c.samples for c in base) / 22050
    assert audio.size / rate_hz == pytest.approx(native_s, rel=0.01)
    if rate_hz == 8000:  # nothing left above Nyquist of the target rate: energy below 4 kHz
        spectrum = np.abs(np.fft.rfft(audio))
        assert spectrum[: spectrum.size * 9 // 10].sum() > 0.95 * spectrum.sum()


@pytest.mark.parametrize(("fmt", "width"), [("float32", 4), ("s16le", 2), ("mulaw", 1)])
def test_each_format_encodes_the_audio(engine, fmt, width):
    chunks, audio = speak(engine, "Please hold.", format=fmt, rate_hz=8000)
    data = b"".join(c.data for c in chunks)
    assert len(data) == width * audio.size
    if fmt == "float32":
        decoded = np.frombuffer(data, "<f4")
    elif fmt == "s16le":
        decoded = np.frombuffer(data, "<i2") / 32768.0
    else:
        decoded = mulaw_decode(np.frombuffer(data, np.uint8), dtype=np.float32)
    tol = {"float32": 0.0, "s16le": 1 / 32768, "mulaw": 0.03}[fmt]
    assert np.abs(decoded - audio).max() <= tol + 1e-6


def snr_db(ref: np.ndarray, x: np.ndarray) -> float:
    noise = float(np.sum((ref.astype(np.float64) - x) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(ref ** 2.0)) / noise)


def test_first_chunk_leaves_before_the_sentence_is_synthesized(engine):
    t0 = time.perf_counter()
    stream = engine.synthesize(SENTENCE, SynthesisOptions(format="float32"))
    first = next(stream)
    t_first = time.perf_counter() - t0
    rest = list(stream)
    t_all = time.perf_counter() - t0
    # The whole sentence went through the front at once; the first chunk is small.
    assert first.text == rest[0].text and len(first.text) > len(SENTENCE) * 0.8
    assert first.front_chars == len(first.text) and first.front_s > 0
    assert not any(c.front_chars for c in rest)
    assert first.duration_s == pytest.approx(engine.config.first_chunk_s, abs=0.02)
    assert len(rest) >= 3
    assert t_first < 0.6 * t_all


def test_text_is_cut_only_at_sentence_ends_and_the_clause_path_still_cuts(cache_dir):
    text = ("Our main office is open from eight thirty in the morning to five in the "
            "evening, Monday through Friday, and from nine to noon on Saturdays. Bye.")
    engine = TtsEngine(TtsConfig(precision="fp32", warmup=False), cache_dir=cache_dir)
    texts = [c.text for c in engine.synthesize(text, SynthesisOptions()) if c.text]
    assert list(dict.fromkeys(texts)) == [text[:-5], "Bye."]
    old = TtsEngine(TtsConfig(precision="fp32", warmup=False, decode="clauses"),
                    cache_dir=cache_dir)
    assert old.voice().split is None and old.voice().session is not None
    texts = [c.text for c in old.synthesize(text, SynthesisOptions())]
    assert len(texts[0]) <= old.config.first_clause_max_chars and len(texts) >= 4


def test_a_sentences_chunks_join_to_its_whole_decode(cache_dir):
    text = "Your claim number is 4417. An agent will call you back before noon tomorrow."
    quiet = SynthesisOptions(format="float32", noise_scale=0.0, noise_w_scale=0.0)

    def audio(**kw):  # the chunking itself: FP32 both ways (bf16 is judged at load)
        engine = TtsEngine(TtsConfig(precision="fp32", vocoder="fp32", flow="fp32", warmup=False,
                                     **kw),
                           cache_dir=cache_dir)
        chunks = list(engine.synthesize(text, quiet))
        return chunks, np.concatenate([c.audio for c in chunks])

    small, joined = audio(first_chunk_s=0.1, chunk_s=0.2)
    whole_chunks, whole = audio(first_chunk_s=30.0, chunk_s=30.0)
    assert len(whole_chunks) == 2 and len(small) > 10  # one chunk per sentence vs many
    assert joined.shape == whole.shape
    assert snr_db(whole, joined) >= 40.0
    # Between sentences: faded edges and the pause, no click.
    assert abs(float(whole_chunks[0].audio[-1])) < 1e-3
    assert abs(float(whole_chunks[1].audio[0])) < 1e-3


def test_upcoming_steps_describe_the_chunks_to_come(engine):
    text = "Thank you for calling. Your payment of forty nine dollars was received today."
    stream = engine.synthesize(text, SynthesisOptions(format="float32"))
    planned = list(stream.upcoming())
    assert planned[0].front_chars == len("Thank you for calling.")
    assert [s.front_chars > 0 for s in planned].count(True) == 2  # one front per sentence
    first = next(stream)
    now = list(stream.upcoming())  # the first sentence's chunks are known exactly now
    chunks = list(stream)
    assert sum(c.speech_s for c in [first, *chunks]) == pytest.approx(
        sum(s.speech_s for s in planned), rel=0.3)
    known = [s for s in now if s.front_chars == 0][:len([c for c in chunks
                                                        if c.text == first.text])]
    assert [round(s.speech_s, 4) for s in known] == [
        round(c.speech_s, 4) for c in chunks if c.text == first.text]
    assert list(stream.upcoming()) == []


def test_cancel_stops_between_chunks(engine):
    cancel = threading.Event()
    stream = engine.synthesize(SENTENCE, SynthesisOptions(), cancel=cancel)
    next(stream)
    cancel.set()
    assert list(stream) == []


def test_speed_volume_and_ssml(engine):
    _, normal = speak(engine, "Thank you for your patience.", noise_w_scale=0.0)
    _, slow = speak(engine, "Thank you for your patience.", noise_w_scale=0.0, length_scale=1.5)
    assert slow.size > 1.3 * normal.size
    _, quiet = speak(engine, "Thank you for your patience.", volume=0.25, noise_scale=0.0,
                     noise_w_scale=0.0)
    _, loud = speak(engine, "Thank you for your patience.", noise_scale=0.0, noise_w_scale=0.0)
    assert np.abs(quiet).max() == pytest.approx(0.25 * np.abs(loud).max(), rel=0.02)
    chunks, audio = speak(engine, '<speak>Hello<break time="700ms"/>world</speak>', ssml=True,
                          format="float32")
    hello = np.concatenate([c.audio for c in chunks if c.text == chunks[0].text])
    silence = hello[-int(0.7 * 22050):]
    assert np.abs(silence).max() == 0.0


def test_bad_input_is_typed_and_leaves_the_engine_working(engine):
    cases = [("", {}, "empty_text"), ("x" * 501, {}, "text_too_long"),
             (b"\xff\xfe", {}, "invalid_utf8"), ("a\x07b", {}, "control_characters"),
             ("hi", {"voice": "nobody"}, "unknown_voice"),
             ("hi", {"voice": "../../etc/passwd"}, "invalid_voice_name"),
             ("hi", {"rate_hz": 44100}, "unsupported_rate"), ("hi", {"format": "opus"},
                                                                "unsupported_format"),
             ("<speak>hi", {"ssml": True}, "bad_ssml"), ("[[ ]]", {}, "empty_text"),
             ("<speak> </speak>", {"ssml": True}, "empty_text"), ("hi", {"speaker": 3}, "unknown_speaker")]
    for text, kw, code in cases:
        with pytest.raises(errors.TtsError) as err:
            engine.synthesize(text, SynthesisOptions(**kw))  # raised before any audio
        assert err.value.code == code
    with pytest.raises(errors.UnknownVoice, match=BUNDLED_VOICE):
        engine.synthesize("hi", SynthesisOptions(voice="nobody"))
    chunks, audio = speak(engine, "Still working.")
    assert audio.size > 0


def test_voices_dir_and_kept_int8_variant(tmp_path, cache_dir):
    voices = tmp_path / "voices"
    voices.mkdir()
    src = bundled_voice()
    (voices / "agent.onnx").symlink_to(src.model_path)
    shutil.copy(src.config_path, voices / "agent.onnx.json")
    (voices / "lonely.onnx").write_bytes(b"")  # no .json: not a voice
    assert sorted(discover([str(voices)])) == ["agent", BUNDLED_VOICE]
    metas = TtsEngine(TtsConfig(voices_dirs=(str(voices),))).voices()
    assert [(m.name, m.language, m.sample_rate_hz, m.quality) for m in metas] == [
        ("agent", "en_US", 22050, "medium"), (BUNDLED_VOICE, "en_US", 22050, "medium")]
    state = tmp_path / "state"
    files = discover([str(voices)])["agent"]
    assert kept_int8(files, state) is None
    # A kept variant (here: a copy standing in for it) with a passing manifest is used.
    variant = state / "voices" / "agent"
    variant.mkdir(parents=True)
    shutil.copy(src.model_path, variant / "agent.static.onnx")
    here = int8_dot(cpu_flags())
    manifest = {"model": "agent.static.onnx", "passed": True,
                "source_sha256": file_sha256(src.model_path), "int8_dot": "other"}
    (variant / "manifest.json").write_text(json.dumps(manifest))
    assert kept_int8(files, state) is None  # judged on a CPU whose INT8 adds up otherwise
    manifest["int8_dot"] = here
    (variant / "manifest.json").write_text(json.dumps(manifest))
    engine = TtsEngine(TtsConfig(voices_dirs=(str(voices),), vocoder="fp32"),
                       cache_dir=cache_dir, state_dir=str(state))
    assert engine.voice("agent", "auto").precision == "int8"
    assert engine.voice("agent", "fp32").precision == "fp32"
    # With the vocoder on auto, a CPU with native bf16 keeps FP32 (the bf16 vocoder).
    engine = TtsEngine(TtsConfig(voices_dirs=(str(voices),)), cache_dir=cache_dir,
                       state_dir=str(state))
    bf16 = bf16_flag(cpu_flags()) is not None
    assert engine.voice("agent", "auto").precision == ("fp32" if bf16 else "int8")
    assert engine.voice("agent", "int8").precision == "int8"
    manifest["source_sha256"] = "0" * 64  # built from another model: ignored
    (variant / "manifest.json").write_text(json.dumps(manifest))
    assert kept_int8(files, state) is None
    with pytest.raises(errors.NoInt8Variant):
        TtsEngine(TtsConfig(voices_dirs=(str(voices),)), state_dir=str(state)).voice("agent", "int8")


def test_say_cli_wav_and_stdout(tmp_path, cache_dir):
    out = tmp_path / "out.wav"
    warm = ["--set", f"service.cache_dir={cache_dir}"]  # the module's engines made its graphs
    cmd = [sys.executable, "-m", "cosyvoiced.tts.cli", "say", "Your code is B4T.", "-o", str(out),
           "--rate", "16000", "--precision", "fp32", *warm]
    subprocess.run(cmd, check=True, timeout=120)
    with wave.open(str(out)) as w:
        assert (w.getframerate(), w.getsampwidth(), w.getnchannels()) == (16000, 2, 1)
        assert w.getnframes() > 16000
    raw = subprocess.run(cmd[:5] + ["-o", "-", "--rate", "8000", "--format", "mulaw", "--precision",
                                    "fp32", *warm], check=True, capture_output=True,
                         timeout=120).stdout
    assert len(raw) > 8000 and b"{" not in raw[:200]  # audio only: logs go to stderr
    bad = subprocess.run(cmd[:4] + ["", "-o", "-"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "empty_text" in bad.stderr


def test_resampled_audio_stays_within_full_scale(engine):
    """A loud voice resampled to 8 kHz rings past ±1 in the filter: the chunks are clipped
    after it, as `AudioChunk` promises (μ-law of an overshoot is off by the overshoot)."""
    chunks, audio = speak(engine, "Please hold.", rate_hz=8000, format="float32", volume=4.0)
    assert np.abs(audio).max() <= 1.0
    assert np.abs(audio).max() > 0.99  # it did reach full scale


def test_a_repeated_sentence_is_said_from_the_prompt_cache(cache_dir):
    engine = TtsEngine(TtsConfig(precision="fp32", warmup=False), cache_dir=cache_dir)
    text = "Thank you for calling. Your reference is four two seven."
    first, audio = speak(engine, text, format="float32")
    assert not any(c.cached for c in first) and engine.prompts.misses == 2
    stream = engine.synthesize(text, SynthesisOptions(format="float32"))
    planned = list(stream.upcoming())
    assert planned and all(s.cached for s in planned)  # the scheduler sees no model run
    again = list(stream)
    assert all(c.cached and c.front_chars == 0 and c.front_s == 0 for c in again)
    assert engine.prompts.hits == 2
    assert np.array_equal(np.concatenate([c.audio for c in again]), audio)
    assert again[0].duration_s == pytest.approx(engine.config.first_chunk_s, abs=0.02)
    assert [c.duration_s for c in again] == pytest.approx([c.duration_s for c in first],
                                                           abs=0.02)  # steps as synthesized
    # another setting is another sentence; a known sentence before a new one is still a hit
    slower, _ = speak(engine, text, format="float32", length_scale=1.3)
    assert not any(c.cached for c in slower)
    mixed, _ = speak(engine, "Thank you for calling. Your balance is nine dollars.",
                     format="float32")
    greeting = [c.cached for c in mixed if c.text == "Thank you for calling."]
    assert greeting and all(greeting)
    assert not any(c.cached for c in mixed if "balance" in c.text)


def test_a_cancelled_sentence_is_not_kept(cache_dir):
    engine = TtsEngine(TtsConfig(precision="fp32", warmup=False), cache_dir=cache_dir)
    cancel = threading.Event()
    stream = engine.synthesize(SENTENCE, SynthesisOptions(), cancel=cancel)
    next(stream)
    cancel.set()
    assert list(stream) == [] and len(engine.prompts) == 0


def test_warmed_prompts_persist_for_the_next_start(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# the menu\nPress one for billing.\nPlease hold.\n")
    config = TtsConfig(precision="fp32", vocoder="fp32", flow="fp32", warmup=False,
                       cache_persist=True, cache_prompts=str(prompts))  # one engine: the key's
    engine = TtsEngine(config, cache_dir=str(tmp_path))
    assert engine.warm_prompts() == 2
    assert len(list((tmp_path / "prompts").glob("*.f32"))) == 2
    later = TtsEngine(config, cache_dir=str(tmp_path))  # the next start: read, not synthesized
    t0 = time.perf_counter()
    assert later.warm_prompts() == 2
    assert later.prompts.hits == 2 and later.prompts.misses == 0
    chunks, _ = speak(later, "Press one for billing.")
    assert all(c.cached for c in chunks)
    assert time.perf_counter() - t0 < 30  # generous: only the voice loads


def test_a_bf16_vocoder_speaks_what_fp32_speaks(cache_dir):
    """bf16 (OpenVINO) decodes the chunk windows it was built for, FP32 the rest; the audio
    is the same length and close to FP32's (runs on any x86 CPU: without native bf16 the
    plugin computes in f32)."""
    opts = {"format": "float32", "noise_scale": 0.0, "noise_w_scale": 0.0}
    fp32 = TtsEngine(TtsConfig(precision="fp32", vocoder="fp32", flow="fp32", warmup=False,
                               cache_mb=0),
                     cache_dir=cache_dir)
    bf16 = TtsEngine(TtsConfig(precision="fp32", vocoder="bf16", flow="fp32", warmup=False,
                               cache_mb=0),
                     cache_dir=cache_dir)
    voice = bf16.voice()
    assert voice.split is not None and voice.split.vocoder == "bf16"
    assert len(voice.split.fast) == 3  # windows of a first chunk, a whole one, a last one
    assert voice.model_id != fp32.voice().model_id  # cached prompts are kept apart
    for text in (SENTENCE, "Please hold."):  # long: bf16 windows; short: FP32 for the rest
        _, ref = speak(fp32, text, **opts)
        _, out = speak(bf16, text, **opts)
        assert out.size == ref.size
        assert snr_db(ref, out) > 25.0


@pytest.mark.parametrize(("setting", "event", "chosen"), [
    ("vocoder", "tts_vocoder", "vocoder"), ("flow", "tts_flow", "flow_precision")])
def test_auto_bf16_follows_the_cpu_and_says_why(cache_dir, setting, event, chosen):
    def load() -> tuple[Any, dict[str, Any]]:
        # the events themselves: whichever sink an earlier test left logging set up with
        with structlog.testing.capture_logs() as logs:
            voice = TtsEngine(TtsConfig(precision="fp32", warmup=False, cache_mb=0,
                                        **{setting: "auto"}), cache_dir=cache_dir).voice()
        said = [e for e in logs if e["event"] == event]
        assert len(said) == 1, logs
        return voice, said[0]

    voice, said = load()
    assert said["precision"] == getattr(voice.split, chosen)
    if bf16_flag(cpu_flags()) is None:
        assert getattr(voice.split, chosen) == "fp32"
        assert "no amx_bf16 or avx512_bf16" in said["reason"]
    else:  # bf16 only if it measured faster here and close to fp32: either way, said
        assert getattr(voice.split, chosen) in ("fp32", "bf16")
        assert "time_vs_fp32" in said and "snr_db" in said
        again, said = load()
        assert getattr(again.split, chosen) == getattr(voice.split, chosen)  # kept for this CPU
        assert said["measured"] == "before"


def test_the_daemons_own_runs_are_not_capped(cache_dir):
    """A worker times itself on sentences longer than the shortest `tts.max_audio_s`: a
    request that long is refused, the same text run uncapped is said whole."""
    from cosyvoiced.tts.errors import AudioTooLong

    engine = TtsEngine(TtsConfig(precision="fp32", max_audio_s=1.0, cache_mb=0),
                       cache_dir=cache_dir)
    with pytest.raises(AudioTooLong):
        engine.synthesize(SENTENCE)
    chunks = list(engine.synthesize(SENTENCE, SynthesisOptions(format="float32"),
                                    capped=False))
    assert sum(c.duration_s for c in chunks) > 2.0
