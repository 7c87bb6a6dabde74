"""The Whisper judge: scoring, the bootstrap, seeded copies, the sentence sets, systems and
the report, and a small real comparison through `main` (its Whisper round trip alone:
tests/e2e/test_judge.py)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import structlog.testing
import tools.judge_systems as judge_systems
import tools.wer as wer

from cosyvoiced.tts.voice.catalog import bundled_voice


@pytest.fixture(scope="module")
def judge(repo_root):
    import tools.judge as module

    return module


def test_scoring_text_splits_digits_and_normalizes(judge):
    assert wer.scoring_text("I paid $1,250.00 on March 14th.") == "i paid $ 1 2 5 0 on march 1 4 th"
    assert wer.scoring_text("forty nine dollars") == wer.scoring_text("$49")
    assert wer.scoring_text("November twenty ninth") == wer.scoring_text("November 29th")
    assert wer.scoring_text("at 3 p.m.") == wer.scoring_text("at 3 PM") == "at 3 pm"
    assert wer.scoring_text("at three P M") == "at 3 pm"
    assert wer.scoring_text("ten thirty A M") == wer.scoring_text("10:30 am") == "1 0 3 0 am"
    assert wer.scoring_text("a m and p m") == "a m and p m"  # letters, not after a number


@pytest.mark.parametrize(("spoken", "written"), [
    # the normalizer drops leading zeros ("0199" -> "199") and keeps "one" a word
    ("one, eight zero zero, five five five, zero one nine nine", "1-800-555-0199"),
    ("zero zero two seven, eight one one four zero", "0027 81140"),
    ("four four eight one, two zero nine three", "4481-2093"),
    # clock times: minutes under ten, on the hour
    ("six oh five P M", "6:05 PM"),
    ("eleven A M", "11:00 a.m."),
    ("ten oh five", "10:05"),
    ("twenty first", "21st"),
    ("the twenty second of May", "the 22nd of May"),
    ("X, as in x-ray, K, as in king, seven, nine, three, B, as in boy.", "XK7-93B"),
    ("B, as in boy, four, T, as in Tom, nine, Q, as in queen", "B4T9Q"),
    ("member ID zero zero two seven", "member ID-0027"),
    ("the nineteen nineties, twenty first time", "the 1990s, 21st time"),
    ("two hundred thirteen dollars and seven cents", "$213.07"),
    ("thirty euros", "€30"),
    ("Miz Nakamura", "Ms. Nakamura"),
    ("this one time", "this 1 time"),
])
def test_scoring_text_reads_two_writings_alike(judge, spoken, written):
    assert wer.scoring_text(spoken) == wer.scoring_text(written)


@pytest.mark.parametrize(("a", "b"), [
    ("6:05 PM", "6:50 PM"),
    ("B, as in boy", "D, as in boy"),
    ("1-800-555-0199", "1-800-555-1990"),
    ("the 3rd", "the 4th"),
    ("8 AM", "8 PM"),
    ("$213.07", "$230.70"),
])
def test_scoring_text_keeps_different_words_apart(judge, a, b):
    assert wer.scoring_text(a) != wer.scoring_text(b)


def test_edit_distance(judge):
    assert wer.edit_distance("a b c".split(), "a x c d".split()) == 2
    assert wer.edit_distance("kitten", "sitting") == 3
    assert wer.edit_distance([], ["a"]) == 1


def test_score_counts_errors_per_seed_and_sentence(judge):
    s = wer.score(["the cat sat", "on the mat 12"], [["the cat sat", "on the mat 12"],
                                                       ["the bat sat", "on mat 13"]])
    assert s.word_errors.tolist() == [[0, 0], [1, 2]]
    assert s.word_counts.tolist() == [3, 5]  # "12" scores as two words
    assert s.wer == pytest.approx(3 / (8 * 2))


def test_bootstrap_interval(judge):
    rng = np.random.default_rng(1)
    counts = np.full(200, 10.0)
    base = rng.integers(0, 2, size=(4, 200)).astype(float)
    same = wer.bootstrap_diff(base, base, counts)
    assert same == (0.0, 0.0, 0.0)
    twin = rng.integers(0, 2, size=(4, 200)).astype(float)  # another draw, same error rate
    mean, lo, hi = wer.bootstrap_diff(twin, base, counts)
    assert lo < 0.0 < hi and abs(mean) < 1.5
    worse = base + (rng.random((4, 200)) < 0.5)  # +0.5 errors per sentence = +5 points
    mean, lo, hi = wer.bootstrap_diff(worse, base, counts)
    assert lo < mean < hi
    assert 4.0 < mean < 6.0 and lo > 3.0 and hi < 7.0
    mean, lo, hi = wer.bootstrap_diff(base, worse, counts)  # the better one: below zero
    assert hi < 0.0


def test_seeded_copies_are_deterministic(judge, tmp_path):
    voice = bundled_voice()
    a, b, c = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "c.onnx"
    assert judge_systems.seeded_copy(voice.model_path, 7, a) >= 1
    judge_systems.seeded_copy(voice.model_path, 7, b)
    judge_systems.seeded_copy(voice.model_path, 8, c)
    text = ["Your claim number is 4071."]
    # the seeds are in the front graph, which ONNX Runtime runs whatever the vocoder's
    # precision: FP32 throughout spares each load auto's bf16 trial (seconds per load)
    x, y, z = (judge_systems.synthesize_set(m, voice.config_path, text, threads=1,
                                            system="cosyvoiced-fp32")[0] for m in (a, b, c))
    np.testing.assert_array_equal(x, y)
    assert x.shape != z.shape or not np.array_equal(x, z)


# -- sentence sets -------------------------------------------------------------------------
def test_sentence_files_parse_and_normalize(judge):
    from cosyvoiced.tts.frontend.normalize import normalize_text

    sets = {f.name: judge.load_sentences(f) for f in judge.SENTENCE_FILES}
    assert set(sets) == {"callcenter_en.txt", "written_en.txt"}
    for name, texts in sets.items():
        assert len(texts) == len(set(texts)), f"{name}: duplicate sentences"
        for text in texts:
            assert not text.startswith("#")
            spoken = normalize_text(text, "en")
            assert spoken and not any(c.isdigit() for c in spoken), (name, text, spoken)
    assert not set(sets["callcenter_en.txt"]) & set(sets["written_en.txt"])


def test_written_set_is_big_and_long(judge):
    path = judge.DATA / "written_en.txt"
    assert path.read_text(encoding="utf-8").startswith("# ")  # a header says what it is
    texts = judge.load_sentences(path)
    assert len(texts) >= 150
    assert sum(len(t) > 120 for t in texts) >= 40
    assert sum(len(t) > 200 for t in texts) >= 5


# -- systems, cache, report ------------------------------------------------------------------
def test_systems_are_checked(judge, monkeypatch):
    with pytest.raises(judge_systems.JudgeError, match="unknown system"):
        judge_systems.check_system("espeak")
    judge_systems.check_system("piper")
    assert judge_systems.tts_config("cosyvoiced").warmup is False
    from cosyvoiced.config import schema

    if "decode" in {f.name for f in dataclasses.fields(schema.TtsConfig)}:
        clauses = judge_systems.tts_config("cosyvoiced-clauses")
        assert (clauses.decode, clauses.first_clause_max_chars, clauses.max_clause_chars) == (
            "clauses", 30, 80)
        assert judge_systems.tts_config("cosyvoiced").decode == "chunked"

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class OldTtsConfig:  # a schema without `decode`
        voice: str = "x"
        warmup: bool = True
        first_clause_max_chars: int = 30
        max_clause_chars: int = 160

    monkeypatch.setattr(schema, "TtsConfig", OldTtsConfig)
    with pytest.raises(judge_systems.JudgeError, match="decode"):
        judge_systems.check_system("cosyvoiced-clauses")
    assert judge.main(["--systems", "cosyvoiced-clauses,piper"]) == 2


def test_cache_file_is_per_system_seed_and_whisper(judge, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not a model, only hashed")
    key = {s: judge._cache_file(tmp_path, model, ["a"], 1, s, "w") for s in judge_systems.SYSTEMS
           if s != "cosyvoiced-clauses"}
    assert len(set(key.values())) == len(key)
    assert key["piper"] == judge._cache_file(tmp_path, model, ["a"], 1, "piper", "w")
    assert key["piper"] != judge._cache_file(tmp_path, model, ["a"], 2, "piper", "w")
    assert key["piper"] != judge._cache_file(tmp_path, model, ["b"], 1, "piper", "w")
    assert key["piper"] != judge._cache_file(tmp_path, model, ["a"], 1, "piper", "w2")
    assert all(p.name.startswith(s + "-") for s, p in key.items())


def test_report_splits_files_and_pairs_with_the_baseline(judge):
    counts = np.array([10.0, 10.0, 20.0])
    scores = {"piper": wer.Scores(np.array([[1.0, 0.0, 2.0]]), counts,
                                    np.zeros((1, 3)), counts * 4),
              "cosyvoiced": wer.Scores(np.array([[0.0, 0.0, 0.0]]), counts,
                                         np.zeros((1, 3)), counts * 4)}
    runs = {name: judge.JudgeRun([["x"] * 3], 1.5, 2.0) for name in scores}
    out = judge.report([("a.txt", 2), ("dir/b.txt", 1)], runs, scores, "piper")
    assert out["piper"]["wer_pct"] == pytest.approx(100 * 3 / 40)
    assert out["piper"]["files"]["a.txt"] == {"sentences": 2, "wer_pct": pytest.approx(5.0),
                                              "cer_pct": 0.0}
    assert out["piper"]["files"]["b.txt"]["wer_pct"] == pytest.approx(10.0)
    assert "wer_diff_vs_piper" not in out["piper"]
    diff = out["cosyvoiced"]["wer_diff_vs_piper"]
    assert diff["points"] == pytest.approx(-7.5) and diff["lo"] <= -7.5 <= diff["hi"] <= 0
    assert wer.worst(scores["piper"], 2) == [2, 0]
    assert wer.worst(scores["cosyvoiced"]) == []


# -- a real comparison ---------------------------------------------------------------------
def test_main_compares_systems(judge, capsys):
    """Three sentences of each set, one seed, cosyvoiced (FP32: auto's bf16 trial has its
    own tests) against Piper."""
    with structlog.testing.capture_logs():  # the engine's info logs, off stdout
        assert judge.main(["--limit", "3", "--seeds", "1", "--systems",
                           "cosyvoiced-fp32,piper", "--threads", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sentences"] == 6 and out["seeds"] == [1] and out["baseline"] == "piper"
    assert set(out["systems"]) == {"cosyvoiced-fp32", "piper"}
    for row in out["systems"].values():
        assert math.isfinite(row["wer_pct"]) and 0 <= row["wer_pct"] < 50
        assert set(row["files"]) == {"callcenter_en.txt", "written_en.txt"}
    diff = out["systems"]["cosyvoiced-fp32"]["wer_diff_vs_piper"]
    assert diff["lo"] <= diff["points"] <= diff["hi"]
