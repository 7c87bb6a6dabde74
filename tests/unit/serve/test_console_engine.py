"""The engine variant each worker runs, from its Ready message to the pool's status row
(what the console's Status panel and `cosyvoiced ctl status` show)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cosyvoiced.ctl import format_status
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.pool.admission import WorkerLoad
from cosyvoiced.workers.pool.procs import Slot
from cosyvoiced.workers.worker.loop import Worker


def voice(precision: str, vocoder: str | None) -> SimpleNamespace:
    split = None if vocoder is None else SimpleNamespace(vocoder=vocoder)
    return SimpleNamespace(precision=precision, split=split)


@pytest.mark.parametrize(("loaded", "warm_up", "variant"), [
    (voice("int8", None), True, "int8"),
    (voice("fp32", "bf16"), True, "bf16"),
    (voice("fp32", "fp32"), True, "fp32"),
    (voice("fp32", None), True, "fp32"),
    (voice("fp32", "bf16"), False, ""),  # nothing loaded before Ready: not reported
])
def test_the_worker_reports_the_variant_its_default_voice_loaded_as(loaded, warm_up, variant):
    worker = SimpleNamespace(setup=SimpleNamespace(warm_up=warm_up),
                             engine=SimpleNamespace(voice=lambda: loaded))
    assert Worker._engine_variant(worker) == variant  # type: ignore[arg-type]


def slot_row(engine: str) -> dict:
    slot = Slot(0, (0,))
    stats = SimpleNamespace(get=lambda key: 0.0, heartbeat_s=lambda: 0.0)
    slot.proc = SimpleNamespace(pid=123, ready=True, stats=stats,  # type: ignore[assignment]
                                ready_msg=m.Ready(0, 123, (0,), 0.2, 30.0, 9, engine))
    load = WorkerLoad(index=0, alive=True, busy=0.0, rtf=0.2, vad_us=30.0, speaking=0,
                      listening=0, streams=0)
    return slot.status(load, 0.8, 1.0)


def test_the_pool_status_row_carries_it_and_ctl_status_prints_it():
    assert slot_row("bf16")["engine"] == "bf16"
    assert slot_row("")["engine"] is None
    st = {"state": "ready", "version": "x", "pid": 1, "uptime_s": 1.0,
          "streams": {"active": 0, "max": 4, "list": []},
          "workers": {"summary": "2 up", "workers": [slot_row("int8"), slot_row("int8")]}}
    assert "engine:   int8\n" in format_status(st)
    st["workers"]["workers"] = [slot_row("")]
    assert "engine:   not reported\n" in format_status(st)
