"""Build NeMo's English text-normalization grammars once, as FSTs a light runtime applies.

Run as `python -m cosyvoiced.tts.frontend.normalize.grammar_build OUT_DIR` (what
`grammars.ensure` does, in a child process, when the grammars are missing): it needs
`nemo_text_processing` and `pynini`, which only this module imports. It builds
`Normalizer(input_case="cased", lang="en")` (~35 s, ~450 MB peak), then writes its three
FSTs arcsorted as OpenFst files that `kaldifst` reads without pynini:

    tagger.fst      tokenize_and_classify (written text -> tagged tokens)
    cuts/           the tagger cut down to the alphabets of common windows (`en_fst`)
    verbalizer.fst  verbalize (tagged tokens -> words)
    post.fst        post_process_graph (spaces and punctuation tidied)
    words.json      the whitelist's written forms ("Dr.", "Mrs.", ...), for the
                    runtime's cheap check of which words need the tagger at all

and last `build.json` (versions, timing): a directory without it is an unfinished build.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FILES = ("tagger.fst", "verbalizer.fst", "post.fst", "words.json")
DONE = "build.json"


def _whitelist_words(package_dir: Path) -> list[str]:
    """The written forms of NeMo's English TTS whitelist (single tokens only)."""
    words: set[str] = set()
    for name in ("tts.tsv", "symbol.tsv"):
        path = package_dir / "text_normalization/en/data/whitelist" / name
        with path.open(encoding="utf-8") as f:
            for row in csv.reader(f, delimiter="\t"):
                if row and row[0].strip() and " " not in row[0].strip():
                    words.add(row[0].strip())
    return sorted(words)


def build(out_dir: str) -> dict[str, object]:
    """Build the grammars into `out_dir` (created; files replaced atomically)."""
    import nemo_text_processing
    import pynini
    from nemo_text_processing.package_info import __version__ as nemo_version
    from nemo_text_processing.text_normalization.normalize import Normalizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=out) as far_dir:
        norm = Normalizer(input_case="cased", lang="en", cache_dir=far_dir)
        built_s = time.perf_counter() - t0
        for name, fst in (("tagger.fst", norm.tagger.fst), ("verbalizer.fst", norm.verbalizer.fst),
                          ("post.fst", norm.post_processor.fst)):
            tmp = out / f".{name}.tmp"
            fst.copy().arcsort("ilabel").write(str(tmp))
            os.replace(tmp, out / name)
    package_dir = Path(nemo_text_processing.__file__).parent
    (out / "words.json").write_text(json.dumps(_whitelist_words(package_dir)))
    # the tagger cut for common alphabets: kaldifst in a process of its own (two OpenFst
    # libraries in one process crash it)
    subprocess.run([sys.executable, "-c", "import sys; from cosyvoiced.tts.frontend."
                    "normalize.en_fst import precut; precut(sys.argv[1])", str(out)],
                   check=True, timeout=600)
    info = {"nemo_text_processing": nemo_version,
            "pynini": pynini.__version__, "build_s": round(built_s, 1),
            "total_s": round(time.perf_counter() - t0, 1)}
    (out / DONE).write_text(json.dumps(info))
    return info


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m cosyvoiced.tts.frontend.normalize.grammar_build OUT_DIR",
              file=sys.stderr)
        return 2
    print(json.dumps(build(argv[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
