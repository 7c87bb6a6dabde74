"""SCHED_FIFO for the calling thread only (audio and call-clock threads, never inference)."""

from __future__ import annotations

import os
import resource
import threading

import structlog

log = structlog.get_logger(__name__)


def ask_fifo(priority: int, who: str) -> bool:
    """Make the calling thread SCHED_FIFO at `priority` (0: do not ask); log the outcome.

    Returns whether it worked. Denied (no CAP_SYS_NICE, RLIMIT_RTPRIO too low) is logged
    with the fix and the thread carries on at normal priority."""
    if priority <= 0:
        return False
    try:
        # pid 0 = the calling thread on Linux: only this thread becomes FIFO.
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError:
        soft, hard = resource.getrlimit(resource.RLIMIT_RTPRIO)
        log.warning("realtime_denied", thread=who, priority=priority, rlimit_rtprio=soft,
                    rlimit_rtprio_max=hard,
                    hint="raise LimitRTPRIO= in the unit (or grant CAP_SYS_NICE); "
                         "the thread runs at normal priority")
        return False
    log.info("realtime", thread=who, priority=priority, tid=threading.get_native_id())
    return True
