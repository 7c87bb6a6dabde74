"""SCHED_FIFO refused by RLIMIT_RTPRIO: logged clearly, audio still runs.

(Granted FIFO, thread-only, is checked in test_alsa.py on the real devices; raising
RLIMIT_RTPRIO here would need CAP_SYS_RESOURCE, which this sandbox does not have.)

Runs a child without CAP_SYS_NICE (setpriv drops it from the bounding set, so even root
is bound by RLIMIT_RTPRIO, set by prlimit), with a fake device at the backend interface.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

CHILD = r"""
import json, os, sys, time
import structlog
events = []
structlog.configure(processors=[lambda _l, _m, e: events.append(e) or ""],
                    logger_factory=structlog.ReturnLoggerFactory())
from tests.unit.audio.alsa.test_errors import FlakyBackend
from cosyvoiced.audio.alsa.device import start_device
from cosyvoiced.config.schema import AudioDeviceConfig
from cosyvoiced.audio.ring import Ring
ring = Ring.create(16000)
t = start_device(AudioDeviceConfig(name="x", pcm="fake", direction="capture", rt_priority=30),
                 ring, opener=lambda r, a: FlakyBackend(None))
t.wait_ready()
time.sleep(0.1)
policy = os.sched_getscheduler(t.native_id)
t.stop()
ring.close(); ring.unlink()
print(json.dumps({"realtime": t.realtime, "thread_policy": policy, "periods": t.periods,
                  "main_policy": os.sched_getscheduler(0),
                  "events": [e for e in events if e["event"].startswith("realtime")]}))
"""


def run_child() -> dict:
    """The child inherits RLIMIT_RTPRIO = 0 (the default) and loses CAP_SYS_NICE."""
    out = subprocess.run(["prlimit", "--rtprio=0:0", "setpriv", "--bounding-set=-sys_nice",
                          sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fifo_refused_by_rlimit_is_logged_and_audio_runs():
    res = run_child()
    assert res["realtime"] is False and res["periods"] > 10
    (event,) = res["events"]
    assert event["event"] == "realtime_denied" and event["thread"] == "alsa:fake"
    assert event["rlimit_rtprio"] == 0 and event["priority"] == 30 and "LimitRTPRIO" in event["hint"]
