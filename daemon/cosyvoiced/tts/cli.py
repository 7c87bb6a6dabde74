"""`cosyvoiced say "TEXT" -o out.wav`: speak without a running daemon.

`-o -` streams raw samples (in `--format`) to stdout as each clause is synthesized;
a `.wav` file is written as 16-bit PCM. Settings come from the config file and
`--set key=value` overrides like the daemon's; a few common ones have their own flags.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import wave
from pathlib import Path
from typing import Any, BinaryIO

import structlog

from cosyvoiced.config.schema import Config
from cosyvoiced.runtime.log import setup_logging
from cosyvoiced.runtime.onnx import OnnxError
from cosyvoiced.tts.engine import TtsEngine
from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.frontend.lexicon import load_lexicon
from cosyvoiced.tts.request import FORMATS, AudioChunk, SynthesisOptions, WordTime
from cosyvoiced.tts.streaming.subtitles import subtitles

log = structlog.get_logger(__name__)


def add_say_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `say` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser("say", help="synthesize text to a WAV file or raw PCM on stdout",
                              description=__doc__.splitlines()[0])
    p.add_argument("text", help='text to speak ("-": read it from stdin)')
    p.add_argument("-o", "--output", required=True,
                   help='output file (.wav: 16-bit PCM WAV; other names and "-": raw samples)')
    p.add_argument("--voice", help="voice name (default: tts.voice)")
    p.add_argument("--speaker", help="speaker id or name (multi-speaker voices)")
    p.add_argument("--rate", type=int, dest="rate_hz", help="output sample rate in Hz")
    p.add_argument("--format", choices=FORMATS, help="raw output sample format (default: tts.format)")
    p.add_argument("--precision", choices=("fp32", "int8", "auto"), help="model precision")
    p.add_argument("--ssml", action="store_true", help="the text is an SSML <speak> document")
    p.add_argument("--length-scale", type=float, help="phoneme length (< 1 faster, > 1 slower)")
    p.add_argument("--volume", type=float, default=1.0, help="output gain multiplier")
    p.add_argument("--words", metavar="FILE",
                   help="write each word's time as JSON (text, start, end, char_start, char_end)")
    p.add_argument("--subtitles", metavar="FILE",
                   help="write subtitle cues built from the words (.srt: SRT, else WebVTT)")
    p.add_argument("--threads", type=int, help="ONNX intra-op threads (default: workers.onnx_threads)")
    p.add_argument("-v", "--verbose", action="store_true", help="log at log.level (default: warnings only)")
    p.add_argument("-c", "--config", help="config file (default: built-in defaults)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, e.g. tts.sentence_silence_ms=200 (repeatable)")
    p.set_defaults(func=run_say)
    return p


def usable_dir(preferred: str, fallback: Path) -> str:
    """`preferred` if it can be created and written, else `fallback` (for non-root runs)."""
    for candidate in (Path(preferred), fallback):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
            if os.access(candidate, os.W_OK):
                return str(candidate)
        except OSError:
            continue
    return str(fallback)


def _config(args: argparse.Namespace) -> Config:
    if args.config is None and not args.set:
        return Config()
    from cosyvoiced.config.loader import load_config

    return load_config(args.config, args.set)


def engine_from_config(config: Config, threads: int | None = None) -> TtsEngine:
    home = Path.home()
    cache = usable_dir(config.service.cache_dir, home / ".cache" / "cosyvoiced")
    state = config.service.state_dir
    if not Path(state).is_dir():
        state = usable_dir(state, home / ".local" / "state" / "cosyvoiced")
    return TtsEngine(config.tts, threads=threads or config.workers.onnx_threads,
                     cache_dir=cache, state_dir=state, lexicon=load_lexicon(config.tts.lexicon))


def _write(chunks: Any, output: str, stdout: BinaryIO) -> int:
    samples = 0
    if output == "-":
        for chunk in chunks:
            stdout.write(chunk.data)
            stdout.flush()
            samples += chunk.samples
        return samples
    if output.lower().endswith(".wav"):
        with wave.open(output, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            for chunk in chunks:
                if samples == 0:
                    wav.setframerate(chunk.rate_hz)
                wav.writeframes(chunk.data)
                samples += chunk.samples
        return samples
    with open(output, "wb") as f:
        for chunk in chunks:
            f.write(chunk.data)
            samples += chunk.samples
    return samples


def _kept_words(chunk: AudioChunk, words: list[WordTime]) -> AudioChunk:
    words.extend(chunk.words)
    return chunk


def run_say(args: argparse.Namespace) -> int:
    """Run `say`; returns the process exit code (0 ok, 2 bad input or model error)."""
    try:
        config = _config(args)
        # Logs go to stderr: stdout may be carrying the audio.
        setup_logging(config.log.level if args.verbose else "warning", sink="json",
                      stream=sys.stderr)
        text: str | bytes = sys.stdin.buffer.read() if args.text == "-" else args.text
        wav = args.output != "-" and args.output.lower().endswith(".wav")
        options = SynthesisOptions(
            voice=args.voice, speaker=args.speaker, rate_hz=args.rate_hz,
            format="s16le" if wav else args.format, ssml=args.ssml,
            length_scale=args.length_scale, volume=args.volume,
            words=bool(args.words or args.subtitles))
        engine = engine_from_config(config, args.threads)
        chunks = engine.synthesize(text, options, precision=args.precision)
        words: list[WordTime] = []
        _write((_kept_words(c, words) for c in chunks), args.output, sys.stdout.buffer)
        if args.words:
            Path(args.words).write_text(json.dumps({"words": [w.to_json() for w in words]},
                                                   indent=1) + "\n", encoding="utf-8")
        if args.subtitles:
            Path(args.subtitles).write_text(
                subtitles(words, vtt=not args.subtitles.lower().endswith(".srt")),
                encoding="utf-8")
    except (TtsError, OnnxError) as exc:
        print(f"error: {exc.code}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # config errors carry a code too
        code = getattr(exc, "code", None)
        if code is None:
            raise
        print(f"error: {code}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cosyvoiced")
    add_say_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
