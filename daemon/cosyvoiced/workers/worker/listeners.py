"""The listen streams of one worker: VAD taps, the ASR queue, close flushes and acks.

`Worker` (loop.py) owns one `WorkerListening`. Opening a stream adds its `ListenTap` to
the worker's batched VAD tick; with `[asr] enabled` finished utterances are queued on an
`AsrQueue`, and the loop asks `pick_work` whether the next unit of work is a TTS clause
or an ASR batch (policy in `asr_sched`). A batch goes to the box's one ASR process
(`RemoteAsr`; Whisper is loaded there, not in each worker) from a background thread
(`AsrRunner`): the loop starts one, keeps ticking the VAD (and synthesizing) meanwhile,
and delivers its transcripts when they are back.

Closing a listen stream reads what is left in its ring, ends an open utterance
(`voice_stopped`, reason "closed"), makes its queued utterances due now, and sends
`StreamClosed` once their transcripts are out: the main process waits for that ack.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import numpy as np
import structlog

from cosyvoiced.listen.asr import AsrError, Utterance, warm_up_utterance
from cosyvoiced.listen.events import Transcript
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.worker.asr_sched import (
    AsrQueue,
    AsrRunner,
    Decoder,
    pick_work,
    tts_latest_start_s,
)
from cosyvoiced.workers.worker.utterances import Confirm, ListenTap, MelPool, Provisional, Retract
from cosyvoiced.workers.worker.vad_tick import VadTicker

log = structlog.get_logger(__name__)


class WorkerListening:
    def __init__(self, setup: Any, vad: VadTicker, send: Callable[[object], None],
                 *, on_decoded: Callable[[float, float], None] | None = None,
                 on_heard: Callable[[float], None] | None = None,
                 decoder: Decoder | None = None) -> None:
        """`decoder`: where batches are transcribed with `asr.enabled` (default: the box's
        ASR process through `setup.asr_link`; a `WhisperAsr` in this process for benches
        and tests)."""
        self.setup = setup
        self.vad = vad
        self.send = send
        self.taps: dict[str, ListenTap] = {}
        self.vad_cfg = setup.vad
        """`[vad]` for streams opened from now on (`reconfigure` after a reload)."""
        asr_cfg = getattr(setup, "asr", None)
        self.asr: AsrQueue | None = None
        self.runner: AsrRunner | None = None
        self.pool: MelPool | None = None
        self.decoder: Any = None
        if asr_cfg is not None and asr_cfg.enabled:
            if decoder is None:
                from cosyvoiced.workers.worker.asr_remote import RemoteAsr

                if setup.asr_link is None:
                    raise ValueError("asr.enabled without the ASR process's link")
                decoder = RemoteAsr(setup.asr_link, asr_cfg)
            self.decoder = decoder
            self.asr = AsrQueue(self.decoder, self._transcribed, max_batch=asr_cfg.max_batch,
                                on_idle=self._ack)
            self.pool = MelPool(setup.vad, cache_dir=setup.cache_dir)
            self.runner = AsrRunner(self.asr, on_decoded)
        self.on_heard = on_heard
        """Told the seconds of speech of each utterance queued for the decoder."""

    def __len__(self) -> int:
        return len(self.taps)

    # --- start-up -------------------------------------------------------------------

    def warm_up(self) -> float:
        """Decode one short utterance through the ASR process (its connection made, the
        batch time measured); returns its seconds (0 with ASR off or out of reach)."""
        if self.decoder is None or self.pool is None:
            return 0.0
        self.pool.release(self.pool.acquire())  # the filterbank: from the cache after a first run
        assert self.asr is not None and self.runner is not None
        self.runner.warm_up()  # its thread exists (and is pinned) before Ready
        utt = [warm_up_utterance()]
        try:
            self.decoder.transcribe(utt)  # waits for the ASR process (it starts meanwhile)
            t0 = time.perf_counter()
            self.decoder.transcribe(utt)  # timed: a round trip to a warm process
            took = time.perf_counter() - t0
        except AsrError as exc:  # the pool restarts it; batches wait for it meanwhile
            log.warning("asr_warm_up_failed", code=exc.code)
            return 0.0
        self.asr.batch_s = took
        return took

    # --- streams --------------------------------------------------------------------

    def open(self, stream_id: str, rate_hz: int, ring: Any, language: str = "", *,
             words: bool = False) -> None:
        """Start listening on `ring` in `language` ("": `asr.language`), its transcripts
        with word times when `words` (or `asr.word_timestamps`); raises the
        VAD's typed error on a bad rate or no slot, `LanguageError` for a language the
        model does not transcribe."""
        language = language or getattr(self.setup.asr, "language", "")
        if language and self.decoder is not None:
            language = self.decoder.check_language(language)
        tap = ListenTap(stream_id, rate_hz, ring, self.vad_cfg, self.pool,
                        lambda item, sid=stream_id: self._emit(sid, item), language,
                        words=words or bool(getattr(self.setup.asr, "word_timestamps", False)))
        # ASR off: the tick reads (and cleans) the ring itself (no tap on the VAD-only
        # hot path); a tap cleans each window before its history and mel.
        asr = self.pool is not None
        self.vad.add(stream_id, rate_hz, tap if asr else ring, tap.on_prob, raw=not asr)
        self.taps[stream_id] = tap

    def reconfigure(self, vad: Any, asr: Any) -> None:
        """A reload's live keys: the `[vad]` thresholds at once, the other `[vad]` keys for
        streams opened from now on (open ones' buffers are sized by theirs), the live
        `[asr]` keys (beam, encoder window) from the next batch on; the others need a
        restart (buffers and the model are sized by them)."""
        self.vad_cfg = vad
        for tap in self.taps.values():  # the endpointer reads its cfg per window
            tap.endpointer.cfg = replace(tap.endpointer.cfg, threshold=vad.threshold,
                                         neg_threshold=vad.neg_threshold)
        if self.pool is not None and MelPool(vad).frames_cap != self.pool.frames_cap:
            self.pool = MelPool(vad, cache_dir=self.setup.cache_dir)  # open taps keep theirs
        if self.decoder is not None and asr is not None:
            live = {f.name: getattr(asr, f.name) for f in fields(asr) if f.metadata.get("live")}
            self.decoder.cfg = replace(self.decoder.cfg, **live)
        cfg = getattr(self.decoder, "cfg", None)
        log.info("listen_reconfigured", stop_ms=vad.stop_ms, threshold=vad.threshold,
                 beam_size=getattr(cfg, "beam_size", None),
                 min_encoder_frames=getattr(cfg, "min_encoder_frames", None))

    def close(self, stream_id: str) -> bool:
        """Flush and end a listen stream; False if it is not one of ours. The ack
        (`StreamClosed`) is sent once its last transcript is out."""
        tap = self.taps.pop(stream_id, None)
        if tap is None:
            return False
        group = self.vad.groups[tap.rate_hz]
        member = group.members[stream_id]
        slot = member.slot
        if member.raw:  # the tick removed its DC offset so far: the tap's close goes on
            tap.dc.dc[0] = group.dc.dc[slot]
        slots = np.array([slot], dtype=np.intp)

        def run_vad(window: np.ndarray) -> float:
            return float(group.batch.run(slots, window[None])[0])

        try:
            tap.close(run_vad)
        finally:
            self.vad.remove(stream_id)
        if tap.guard.nan:
            log.warning("listen_input_sanitized", stream=stream_id, nan_samples=tap.guard.nan,
                        windows=tap.guard.bad_windows,
                        note="NaN samples in the stream's input were heard as silence")
        if self.asr is None or self.asr.close_when_done(stream_id):
            self._ack(stream_id)
        return True

    def _emit(self, stream_id: str, item: Any) -> None:
        if isinstance(item, Utterance | Provisional | Confirm | Retract):
            asr = self.asr
            if asr is None:
                return
            urgent = stream_id not in self.taps  # being closed: due now
            utt = item if isinstance(item, Utterance) else getattr(item, "utterance", None)
            if utt is not None and self.on_heard is not None:
                self.on_heard((utt.end_ms - utt.start_ms) / 1000.0)
            if isinstance(item, Utterance):
                asr.push(item, urgent=urgent)
            elif isinstance(item, Provisional):
                asr.push(item.utterance, urgent=urgent, provisional=True)
            elif isinstance(item, Confirm):
                asr.confirm(stream_id, urgent=urgent)
            else:
                asr.retract(stream_id)
            return
        log.info(item.type, stream=stream_id, **{k: v for k, v in item.to_dict().items()
                                                 if k.endswith("_ms") or k == "reason"})
        self.send(m.ListenEvent(stream_id, item))

    def _transcribed(self, stream_id: str, result: Any) -> None:
        if isinstance(result, Transcript):
            log.info("transcript", stream=stream_id, start_ms=result.start_ms,
                     end_ms=result.end_ms, latency_ms=result.latency_ms, rtf=result.rtf,
                     chars=len(result.text))  # what was said only at debug
            log.debug("transcript_text", stream=stream_id, start_ms=result.start_ms,
                      text=result.text)
            self.send(m.ListenEvent(stream_id, result))
        else:
            code = getattr(result, "code", "asr_error")
            self.send(m.StreamError(stream_id, -1, code, str(result)))

    def _ack(self, stream_id: str) -> None:
        self.send(m.StreamClosed(stream_id))

    # --- the loop -------------------------------------------------------------------

    def pick(self, tts: Any, now_s: float) -> str | None:
        r = self.runner
        if r is None or not r.running:
            return pick_work(tts, self.asr, now_s)
        if r.finished:
            return "asr"
        return None if tts_latest_start_s(tts, now_s) is None else "tts"

    def run_batch(self) -> int:
        """Deliver a finished batch and start the next (decoded here without a runner)."""
        if self.runner is not None:
            return self.runner.poll()
        return self.asr.run() if self.asr is not None else 0

    def wake_in(self) -> float | None:
        if self.runner is not None:
            return self.runner.wake_in()
        return 0.0 if self.asr is not None and len(self.asr) else None
