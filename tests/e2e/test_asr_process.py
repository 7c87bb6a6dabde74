"""The box's one ASR process on the real daemon: Whisper loaded there and nowhere else,
pinned and niced, transcribing for every worker, and back after a kill -9 with the
utterances sent meanwhile transcribed, not lost."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from cosyvoiced.testing.prompts import Prompt, prompts, wer
from cosyvoiced.workers.worker.affinity import ASR_NICE
from tests.e2e.test_listen import _post_transcribe
from tests.fixtures.daemon import DaemonProcess, ready_daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    # a stopped ASR process is found hung after 4 s, not the default 10: the test waits it
    yield from ready_daemon(tmp_path_factory, "asr-process",
                            overrides=("workers.hang_restart_s=4",))


@pytest.fixture(scope="module")
def clips() -> list[Prompt]:
    return [p for p in prompts() if len(p.text.split()) >= 5][:4]


def _status(d: DaemonProcess) -> dict:
    return d.status()["workers"]


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


def _cpus(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        return next(x.split(":", 1)[1].strip() for x in f if x.startswith("Cpus_allowed_list"))


def _transcribe(d: DaemonProcess, clip: Prompt) -> str:
    base = [x for x in d.listeners() if x.startswith("tcp://")][0].replace("tcp://", "http://")
    return _post_transcribe(base, clip.path.read_bytes())["text"]


def test_whisper_is_loaded_once_for_the_box_pinned_and_niced(daemon, clips):
    st = _status(daemon)
    asr = st["asr"]
    assert asr["alive"] and asr["replicas"] == len(st["workers"])
    assert "ctranslate2" in _maps(asr["pid"])
    for w in st["workers"]:
        assert "ctranslate2" not in _maps(w["pid"]), "a worker loaded Whisper"
    cpus = sorted({c for w in st["workers"] for c in w["cpus"].split(",")})
    assert _cpus(asr["pid"]) in (",".join(cpus), f"{cpus[0]}-{cpus[-1]}")
    base = os.getpriority(os.PRIO_PROCESS, daemon.daemon_pid())
    for tid in os.listdir(f"/proc/{asr['pid']}/task"):
        assert os.getpriority(os.PRIO_PROCESS, int(tid)) == min(19, base + ASR_NICE)
    texts = [_transcribe(daemon, c) for c in clips]
    assert wer([c.text for c in clips], texts) < 25.0


def test_kill_9_the_asr_process_loses_no_utterance(daemon, clips):
    before = _status(daemon)
    victim = before["asr"]["pid"]
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def send(i: int, clip: Prompt) -> None:
        try:
            results[i] = _transcribe(daemon, clip)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    # stopped first, so the batches are surely sent to it and in flight when it dies
    os.kill(victim, signal.SIGSTOP)
    threads = [threading.Thread(target=send, args=(i, c)) for i, c in enumerate(clips)]
    for t in threads:
        t.start()
    time.sleep(4.0)
    os.kill(victim, signal.SIGKILL)
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert wer([c.text for c in clips], [results[i] for i in range(len(clips))]) < 25.0
    after = _status(daemon)
    assert after["asr"]["alive"] and after["asr"]["pid"] != victim
    assert after["restarts"] == before["restarts"] + 1
    assert all(w["alive"] for w in after["workers"])  # the workers never noticed
    events = daemon.log_events()
    died = [e for e in events if e.get("event") == "asr_died"]
    assert died and died[-1]["pid"] == victim
    resent = [e for e in events if e.get("event") == "asr_batch_resent"]
    assert sum(e["utterances"] for e in resent) >= 1
    again = _transcribe(daemon, clips[0])
    assert wer([clips[0].text], [again]) < 40.0
    assert np.isfinite(after["workers"][0]["asr_rtf"])


def test_a_stopped_asr_process_is_killed_and_started_again(daemon, clips):
    victim = _status(daemon)["asr"]["pid"]
    os.kill(victim, signal.SIGSTOP)  # alive, answering nothing
    t0 = time.monotonic()
    while _status(daemon)["asr"]["pid"] in (victim, None) or not _status(daemon)["asr"]["alive"]:
        assert time.monotonic() - t0 < 60, "a stopped ASR process was never replaced"
        time.sleep(0.5)
    hung = [e for e in daemon.log_events() if e.get("event") == "asr_hung"]
    assert hung and hung[-1]["pid"] == victim
    assert wer([clips[1].text], [_transcribe(daemon, clips[1])]) < 40.0
