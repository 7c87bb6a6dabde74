"""Pronunciation control on the real daemon: the `tts.lexicon` file (read again on
SIGHUP) and SSML `<phoneme>`/`<sub>`.

What the lexicon controls is asserted exactly: the phonemes the voice is given (the
daemon logs them at debug level, `tts_phonemes`), before and after a reload. The audio is
then judged by Whisper on whole sentences with a margin (most words heard, each within a
spelling's distance), never on one word: tiny.en hears "platinum" as "pladinim" on some
engines. The brand names are made up and spelled so that the voice's own reading is heard
as something else ("Qyxelle" as "kxl" or "kexel"); with the entry the voice says
"banana", far from any reading of the spelling.
"""

from __future__ import annotations

import difflib
import io
import json
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
from tools.wer import scoring_text

from cosyvoiced.listen.asr import WhisperAsr
from cosyvoiced.tts.frontend.phonemize import espeak_phonemes, raw_phonemes
from cosyvoiced.workers.worker.loop import RTF_TEXT

TEXT = "Thank you for calling Qyxelle support."
LEXICON = '[ipa]\nQyxelle = "bənˈænə"\n\n[say]\nGhoyce = "platinum"\n'
BANANA = "".join(raw_phonemes("bənˈænə"))
DEBUG = 'log.level="debug"'
TIMED = "".join(espeak_phonemes(RTF_TEXT, "en-us"))
"""What a worker says to time itself once warm (after a reload too): not a request's."""
NUMBERS = {"Your payment of $312.40 is due on March 14, 2026.": ("3 1 2", "4 0", "1 4", "2 0 2 6"),
           "Please call 1-800-555-0199.": ("8 0 0", "0 1 9 9")}
"""Money, a date and a phone number, each sentence with the digit groups the daemon's own ASR
must hear in it after number normalization (each digit a word: "$312.40" and "three hundred
twelve dollars forty cents" alike); "555" is left out: tiny.en often writes it "55". Each
sentence is heard on its own: tiny.en sometimes drops the second sentence of a clip."""


@pytest.fixture(scope="module")
def judge() -> WhisperAsr:
    return WhisperAsr()


def _base(d) -> str:
    for x in json.loads(d.ctl("--json", "status").stdout)["listeners"]:
        if x.startswith("tcp://"):
            return x.replace("tcp://", "http://")
    raise AssertionError("no HTTP listener")


def _post(base: str, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(f"{base}/v1/tts", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _hear(judge: WhisperAsr, base: str, text: str, *, ssml: bool = False) -> list[str]:
    heard = _hear_text(judge, base, text, ssml=ssml).lower()
    return "".join(c if c.isalpha() or c.isspace() else " " for c in heard).split()


def _hear_text(judge: WhisperAsr, base: str, text: str, *, ssml: bool = False) -> str:
    """What our own ASR hears of the daemon saying `text` (as Whisper writes it)."""
    status, data = _post(base, {"text": text, "ssml": ssml, "format": "wav"})
    assert status == 200, data[:200]
    with wave.open(io.BytesIO(data)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(1 << 30), dtype="<i2")
    audio = soxr.resample(pcm.astype(np.float32) / 32768.0, rate, 16000)
    return judge.transcribe_audio(audio).text


def _near(word: str, heard: list[str]) -> bool:
    """Heard within a spelling's distance ("pladinim" for "platinum" is 0.75)."""
    return any(difflib.SequenceMatcher(None, word, h).ratio() >= 0.7 for h in heard)


def _recall(expected: str, heard: list[str]) -> float:
    words = expected.split()
    return sum(_near(w, heard) for w in words) / len(words)


def _said(d, base: str, text: str, *, ssml: bool = False) -> str:
    """The phonemes the voice was given for one request (a text not said before: a prompt
    the cache holds is not phonemized again)."""
    seen = len(d.log_events())
    status, data = _post(base, {"text": text, "ssml": ssml, "format": "wav"})
    assert status == 200, data[:200]
    deadline = time.monotonic() + 10
    while True:
        said = [e["phonemes"] for e in d.log_events()[seen:] if e.get("event") == "tts_phonemes"
                and e["phonemes"] != TIMED]
        if said or time.monotonic() > deadline:
            return " ".join(said)
        time.sleep(0.1)


def _hup(d) -> None:
    hup = time.monotonic()
    d.signal(signal.SIGHUP)
    d.notify.wait_for("READY", "1", after=hup, timeout_s=10)


def test_lexicon_entry_changes_what_the_voice_is_given_and_reloads(daemon_factory, tmp_path,
                                                                    judge):
    lex = tmp_path / "lexicon.toml"
    lex.write_text("[say]\n")
    d = daemon_factory(overrides=(f'tts.lexicon="{lex}"', DEBUG)).start()
    d.wait_ready()
    base = _base(d)
    before = _said(d, base, TEXT)
    assert before and BANANA not in before, before
    assert not _near("banana", _hear(judge, base, TEXT))

    lex.write_text(LEXICON)
    _hup(d)
    after = _said(d, base, "Thank you for calling Qyxelle support today.")
    assert BANANA in after, after
    # the word stayed inside its sentence: one clause, espeak's phonemes around it
    assert after.startswith("".join(espeak_phonemes("Thank you for calling", "en-us"))), after
    assert _said(d, base, "Welcome to Ghoyce.") == "".join(
        espeak_phonemes("Welcome to platinum.", "en-us"))  # a [say] respelling
    heard = _hear(judge, base, TEXT)
    assert _near("banana", heard) and _recall("thank you for calling banana support",
                                              heard) >= 4 / 6, heard
    loaded = [e for e in d.log_events() if e.get("event") == "lexicon_loaded"]
    assert loaded[-1]["entries"] == 2

    lex.write_text('[ipa]\nQyxelle = "p1"\n')  # broken: the running lexicon stays
    _hup(d)
    rejected = [e for e in d.log_events() if e.get("event") == "lexicon_rejected"]
    assert rejected and "Qyxelle" in rejected[-1]["error"]
    assert BANANA in _said(d, base, "Qyxelle support, how may I help?")
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_ssml_phoneme_and_sub_are_said_numbers_heard_and_a_bad_ph_is_a_400(daemon_factory,
                                                                          judge):
    d = daemon_factory(overrides=(DEBUG,)).start()
    d.wait_ready()
    base = _base(d)
    doc = ('<speak>Thank you for calling <phoneme alphabet="ipa" ph="bənˈænə">Qyxelle'
           '</phoneme> support, and <sub alias="platinum">Ghoyce</sub> rewards.</speak>')
    said = _said(d, base, doc, ssml=True)
    assert BANANA in said and "plˈætɪnəm" in said, said
    heard = _hear(judge, base, doc, ssml=True)
    expected = "thank you for calling banana support and platinum rewards"
    assert _near("banana", heard) and _recall(expected, heard) >= 7 / 9, heard
    # money, a date and a phone number, read by the grammars and heard as their digits
    heard_groups = []
    for sentence, groups in NUMBERS.items():
        heard_numbers = f" {scoring_text(_hear_text(judge, base, sentence))} "
        heard_groups += [(g, f" {g} " in heard_numbers, heard_numbers) for g in groups]
    # one group of six may be misheard: a tiny ASR's slip, not the front end's
    assert sum(ok for _, ok, _ in heard_groups) >= 5, heard_groups
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
