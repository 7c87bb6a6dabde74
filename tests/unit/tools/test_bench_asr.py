"""The asr bench's own pipeline runs the worker's listening path on real prompts with
Whisper in process (the daemon's decodes go to its ASR process instead)."""

from __future__ import annotations

from tools.bench.asr import _ours

from cosyvoiced.config.schema import AsrConfig, VadConfig
from cosyvoiced.testing.prompts import prompts, wer


def test_our_pipeline_transcribes_real_prompts_in_process():
    items = [p for p in prompts() if len(p.text.split()) >= 4][:3]
    hyps, wall, asr_s, speech_s, retries = _ours(items, VadConfig(), AsrConfig())
    assert len(hyps) == 3 and all(h.strip() for h in hyps)
    assert wer([p.text for p in items], hyps) < 40.0
    assert 0 < asr_s < wall and speech_s > 1.0 and retries >= 0
