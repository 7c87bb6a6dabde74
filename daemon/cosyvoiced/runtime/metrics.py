"""Prometheus metrics: low cardinality, no per-call labels.

One `Metrics` object per daemon, on its own registry (tests can run several daemons'
worth in one process). Parts update it; `GET /metrics` renders it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    exposition,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS_S = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
TICK_LATE_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
RTF_BUCKETS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)

CONTENT_TYPE = exposition.CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.active_streams = Gauge("cosyvoiced_active_streams", "Streams now active",
                                    ["kind"], registry=r)
        self.tts_rtf = Histogram("cosyvoiced_tts_rtf", "Synthesis time / audio duration "
                                 "per finished request", buckets=RTF_BUCKETS, registry=r)
        self.tts_first_audio = Histogram("cosyvoiced_tts_first_audio_seconds",
                                         "Request to first audio chunk",
                                         buckets=LATENCY_BUCKETS_S, registry=r)
        self.transcript_latency = Histogram("cosyvoiced_transcript_latency_seconds",
                                            "End of speech to transcript",
                                            buckets=LATENCY_BUCKETS_S, registry=r)
        self.xruns = Counter("cosyvoiced_xruns", "ALSA xruns recovered", ["direction"],
                             registry=r)
        self.underruns = Counter("cosyvoiced_underruns", "Playback ring came up short "
                                 "while a stream was playing", ["kind"], registry=r)
        self.dropped_frames = Counter("cosyvoiced_dropped_frames", "Capture frames dropped "
                                      "on a full ring", ["kind"], registry=r)
        self.ring_fill = Gauge("cosyvoiced_ring_fill_ratio", "Mean fill of the rings",
                               ["direction"], registry=r)
        self.refused = Counter("cosyvoiced_admissions_refused", "New streams or requests "
                               "refused", ["reason"], registry=r)
        self.tick_late = Histogram("cosyvoiced_audiosocket_tick_late_seconds",
                                   "How late the 20 ms call clock woke (pacing jitter at "
                                   "the source)", buckets=TICK_LATE_BUCKETS_S, registry=r)
        self.worker_restarts = Counter("cosyvoiced_worker_restarts", "Inference workers "
                                       "restarted after dying", registry=r)
        self.worker_busy = Gauge("cosyvoiced_worker_busy_ratio", "Busy fraction of each "
                                 "inference worker", ["worker"], registry=r)
        self.worker_ahead = Gauge("cosyvoiced_worker_ahead_ratio", "Part of each worker's "
                                  "busy fraction spent on TTS made ahead of every deadline",
                                  ["worker"], registry=r)
        self.worker_owed = Gauge("cosyvoiced_worker_owed_ratio", "Share of each worker its "
                                 "TTS streams need to say what they have left before "
                                 "their listeners run dry (admission's TTS load)",
                                 ["worker"], registry=r)
        self.tts_late_steps = Counter("cosyvoiced_tts_late_steps", "TTS steps made after "
                                      "their listener had run out of audio (a gap heard "
                                      "at real-time playback)", registry=r)
        self.workers = Gauge("cosyvoiced_workers", "Inference worker slots configured",
                             registry=r)
        self.workers_up = Gauge("cosyvoiced_workers_up", "Inference workers alive",
                                registry=r)
        self.worker_tts_rtf = Gauge("cosyvoiced_worker_tts_rtf", "Each worker's recent TTS "
                                    "real-time factor (synthesis time / audio time)",
                                    ["worker"], registry=r)
        self.stalled_parts = Gauge("cosyvoiced_health_stalled_parts", "Parts (event loop, "
                                   "audio threads, workers) without progress within "
                                   "service.health_stall_s: while above 0 the systemd "
                                   "watchdog is not pinged", registry=r)
        self._on_scrape: list[Callable[[Metrics], None]] = []
        self._counted = {"restarts": 0, "late_steps": 0}
        """The pool's running totals already added to their counters."""

    def on_scrape(self, refresh: Callable[[Metrics], None]) -> None:
        """Call `refresh(self)` before each render (gauges read from live state)."""
        self._on_scrape.append(refresh)

    def set_pool(self, status: Mapping[str, Any]) -> None:
        """The worker gauges from the pool's status, and its running totals (restarts, late
        TTS steps) added to their counters by what grew since the last call."""
        workers = status["workers"]
        self.workers.set(len(workers))
        self.workers_up.set(sum(1 for w in workers if w["alive"]))
        for w in workers:
            self.worker_busy.labels(str(w["index"])).set(w["busy"])
            self.worker_ahead.labels(str(w["index"])).set(w["ahead"])
            self.worker_owed.labels(str(w["index"])).set(w["owed"])
            self.worker_tts_rtf.labels(str(w["index"])).set(w["rtf"])
        for key, counter in (("restarts", self.worker_restarts),
                             ("late_steps", self.tts_late_steps)):
            if status[key] > self._counted[key]:
                counter.inc(status[key] - self._counted[key])
                self._counted[key] = status[key]

    def watch_workers(self, figures: Callable[[], Sequence[Mapping[str, float]]]) -> None:
        """Export what the live workers add up to (their `WorkerStats`): queue depth and
        the prompt cache, read at every scrape."""
        self.registry.register(WorkerFigures(figures))

    def render(self) -> bytes:
        for refresh in self._on_scrape:
            refresh(self)
        return generate_latest(self.registry)


class WorkerFigures(Collector):
    """Sums of what the workers publish in shared memory, as metrics at scrape time (the
    per-worker gauges are set by the daemon's scrape hook, `Metrics.on_scrape`)."""

    def __init__(self, figures: Callable[[], Sequence[Mapping[str, float]]]) -> None:
        self.figures = figures

    def describe(self) -> list[Metric]:
        return []  # families are named in collect(); nothing to check at register

    def collect(self) -> Iterator[Metric]:
        workers = self.figures()
        queued = GaugeMetricFamily("cosyvoiced_queue_depth", "Jobs waiting in the workers",
                                   labels=["kind"])
        queued.add_metric(["tts"], sum(w["queued"] for w in workers))
        yield queued
        yield CounterMetricFamily("cosyvoiced_tts_prompt_cache_hits", "Sentences said from "
                                  "the prompt cache (live workers)",
                                  value=sum(w["prompt_hits"] for w in workers))
        yield CounterMetricFamily("cosyvoiced_tts_prompt_cache_misses", "Sentences looked up "
                                  "in the prompt cache and synthesized (live workers)",
                                  value=sum(w["prompt_misses"] for w in workers))
        yield GaugeMetricFamily("cosyvoiced_tts_prompt_cache_bytes", "Audio held in the "
                                "workers' prompt caches",
                                value=sum(w["prompt_bytes"] for w in workers))
