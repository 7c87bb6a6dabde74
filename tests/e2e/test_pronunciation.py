"""Pronunciation control on the real daemon: the `tts.lexicon` file (read again on
SIGHUP) and SSML `<phoneme>`/`<sub>`, judged by what Whisper hears.

The brand names are made up and spelled so that the voice's own reading is heard as
something else ("Qyxelle" as "kxl" or "kexel", by vocoder); with the entry, Whisper hears
the real word the IPA spells ("banana": far from any reading of the spelling, where a
near word such as "pixel" was sometimes heard without the entry too). The respelling and
the `<sub>` alias are "platinum", a word no reading of "Ghoyce" comes near and Whisper
hears every time (a near word, "choice", was once heard as "toys")."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import wave

import numpy as np
import pytest
import soxr

from cosyvoiced.listen.asr import WhisperAsr

TEXT = "Thank you for calling Qyxelle support."
LEXICON = '[ipa]\nQyxelle = "bənˈænə"\n\n[say]\nGhoyce = "platinum"\n'


@pytest.fixture(scope="module")
def judge() -> WhisperAsr:
    return WhisperAsr()


def _base(d) -> str:
    import json
    for x in json.loads(d.ctl("--json", "status").stdout)["listeners"]:
        if x.startswith("tcp://"):
            return x.replace("tcp://", "http://")
    raise AssertionError("no HTTP listener")


def _post(base: str, body: dict) -> tuple[int, bytes]:
    import json
    req = urllib.request.Request(f"{base}/v1/tts", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _hear(judge: WhisperAsr, base: str, text: str, *, ssml: bool = False) -> str:
    status, data = _post(base, {"text": text, "ssml": ssml, "format": "wav"})
    assert status == 200, data[:200]
    with wave.open(io.BytesIO(data)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(1 << 30), dtype="<i2")
    audio = soxr.resample(pcm.astype(np.float32) / 32768.0, rate, 16000)
    return judge.transcribe_audio(audio).text.lower()


def _hup(d) -> None:
    hup = time.monotonic()
    d.signal(signal.SIGHUP)
    d.notify.wait_for("READY", "1", after=hup, timeout_s=10)


def test_lexicon_entry_makes_a_brand_name_heard_right_and_reloads(daemon_factory, tmp_path,
                                                                   judge):
    lex = tmp_path / "lexicon.toml"
    lex.write_text("[say]\n")
    d = daemon_factory(overrides=(f'tts.lexicon="{lex}"',)).start()
    d.wait_ready()
    base = _base(d)
    before = _hear(judge, base, TEXT)
    assert "banana" not in before, before

    lex.write_text(LEXICON)
    _hup(d)
    after = _hear(judge, base, TEXT)
    assert "banana" in after, after
    assert "thank you for calling" in after  # the word stayed inside its sentence
    assert "platinum" in _hear(judge, base, "Welcome to Ghoyce.")  # a [say] respelling
    loaded = [e for e in d.log_events() if e.get("event") == "lexicon_loaded"]
    assert loaded[-1]["entries"] == 2

    lex.write_text('[ipa]\nQyxelle = "p1"\n')  # broken: the running lexicon stays
    _hup(d)
    rejected = [e for e in d.log_events() if e.get("event") == "lexicon_rejected"]
    assert rejected and "Qyxelle" in rejected[-1]["error"]
    assert "banana" in _hear(judge, base, TEXT)
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_ssml_phoneme_and_sub_are_heard_and_a_bad_ph_is_a_400(daemon_factory, judge):
    d = daemon_factory().start()
    d.wait_ready()
    base = _base(d)
    doc = ('<speak>Thank you for calling <phoneme alphabet="ipa" ph="bənˈænə">Qyxelle'
           '</phoneme> support, and <sub alias="platinum">Ghoyce</sub> rewards.</speak>')
    heard = _hear(judge, base, doc, ssml=True)
    assert "banana" in heard and "platinum" in heard, heard
    status, body = _post(base, {"text": '<speak><phoneme ph="x9">x</phoneme></speak>',
                                "ssml": True})
    assert status == 400 and b"bad_ssml" in body, body
    status, body = _post(base, {"text": '<speak><phoneme alphabet="x-sampa" ph="p">x'
                                        '</phoneme></speak>', "ssml": True})
    assert status == 400 and b"bad_ssml" in body, body
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_a_broken_lexicon_at_start_is_a_config_error(daemon_factory, tmp_path, repo_root):
    lex = tmp_path / "bad.toml"
    lex.write_text('[ipa]\nQyxelle = "<p>"\n')
    d = daemon_factory(overrides=(f'tts.lexicon="{lex}"',)).start()
    assert d.wait(60) == 78
    assert any("tts.lexicon" in str(e) for e in d.log_events()), d.log_path.read_text()[-500:]
    check = subprocess.run([sys.executable, "-m", "cosyvoiced", "check-config",
                            str(repo_root / "configs" / "dev.toml"), "--set",
                            f'tts.lexicon="{lex}"'], capture_output=True, text=True, timeout=60)
    assert check.returncode == 78 and "tts.lexicon" in check.stderr, check.stderr
