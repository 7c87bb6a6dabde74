"""Build NeMo's English text-normalization grammars once, as FSTs a light runtime applies.

Run as `python -m cosyvoiced.tts.frontend.normalize.grammar_build OUT_DIR` (what
`grammars.ensure` does, in a child process, when the grammars are missing): it needs
`nemo_text_processing` and `pynini`, which only this module imports. It builds
`Normalizer(input_case="cased", lang="en")` (~35 s, ~450 MB peak), then writes its three
FSTs arcsorted as OpenFst files that `kaldifst` reads without pynini:

    tagger.fst      tokenize_and_classify (written text -> tagged tokens), its chains
                    of arcs that read nothing folded into one arc each (`fold_chains`)
    tagger_strings.json  what the folded arcs write: output label 256 + i is string i
    verbalizer.fst  verbalize (tagged tokens -> words)
    post.fst        post_process_graph (spaces and punctuation tidied)
    words.json      the whitelist's written forms ("Dr.", "Mrs.", ...), for the
                    runtime's cheap check of which words need the tagger at all

and last `build.json` (versions, timing): a directory without it is an unfinished build.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FILES = ("tagger.fst", "tagger_strings.json", "verbalizer.fst", "post.fst", "words.json")
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
    # the tagger's chains folded: kaldifst in a process of its own (two OpenFst libraries
    # in one process crash it)
    subprocess.run([sys.executable, "-m", "cosyvoiced.tts.frontend.normalize.grammar_build",
                    "--fold", str(out)], check=True, timeout=600)
    info = {"nemo_text_processing": nemo_version,
            "pynini": pynini.__version__, "build_s": round(built_s, 1),
            "total_s": round(time.perf_counter() - t0, 1)}
    (out / DONE).write_text(json.dumps(info))
    return info


def fold_chains(fst: Any) -> tuple[Any, list[bytes]]:
    """`fst` (a kaldifst StdVectorFst) with each chain of arcs through states of one arc
    in and one out, no more than one of them reading a byte, made one arc that writes
    what the chain wrote; and the strings written by more than one byte (output label
    `256 + i` writes string i). Every path reads and writes what it did at the weight it
    had; a compose walks one state where it walked one per byte written."""
    import kaldifst as kf

    arcs = [[(a.ilabel, a.olabel, a.weight.value, a.nextstate) for a in kf.ArcIterator(fst, s)]
            for s in range(fst.num_states)]
    final = [fst.final(s).value for s in range(fst.num_states)]
    into = [0] * len(arcs)
    for out in arcs:
        for arc in out:
            into[arc[3]] += 1
    start = fst.start
    through = [s != start and final[s] == math.inf and into[s] == 1 and len(arcs[s]) == 1
               for s in range(len(arcs))]
    strings: dict[bytes, int] = {}

    def label(written: list[int]) -> int:
        if len(written) < 2:
            return written[0] if written else 0
        return strings.setdefault(bytes(written), 256 + len(strings))

    kept = {start: 0}
    order = [start]
    folded: list[list[tuple[int, int, float, int]]] = []
    for q in order:  # grows as states are kept
        mine = []
        for ilabel, olabel, weight, nxt in arcs[q]:
            written = [olabel] if olabel else []
            while through[nxt] and not (ilabel and arcs[nxt][0][0]):
                il, ol, w, nxt = arcs[nxt][0]
                ilabel = ilabel or il
                written += [ol] if ol else []
                weight += w
            if nxt not in kept:
                kept[nxt] = len(order)
                order.append(nxt)
            mine.append((ilabel, label(written), weight, nxt))
        folded.append(mine)
    out = kf.StdVectorFst()
    for _ in order:
        out.add_state()
    out.start = 0
    for k, q in enumerate(order):
        if final[q] != math.inf:
            out.set_final(k, final[q])
        for ilabel, olabel, weight, nxt in folded[k]:
            out.add_arc(k, kf.StdArc(ilabel, olabel, weight, kept[nxt]))
    kf.arcsort(out, "ilabel")
    return out, list(strings)


def fold_tagger(directory: Path) -> None:
    """`directory`'s tagger.fst folded (`fold_chains`) in place, and its strings written
    to tagger_strings.json (one char a byte)."""
    import kaldifst as kf

    tagger, strings = fold_chains(kf.StdVectorFst.read(str(directory / "tagger.fst")))
    (directory / "tagger_strings.json").write_text(
        json.dumps([s.decode("latin-1") for s in strings]), encoding="utf-8")
    tmp = directory / ".tagger.fst.tmp"
    tagger.write(str(tmp))
    os.replace(tmp, directory / "tagger.fst")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--fold":
        fold_tagger(Path(argv[1]))
        return 0
    if len(argv) != 1:
        print("usage: python -m cosyvoiced.tts.frontend.normalize.grammar_build OUT_DIR",
              file=sys.stderr)
        return 2
    print(json.dumps(build(argv[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
