"""The build's fold of the tagger's write-only chains: every path reads and writes what it
did at the weight it had, through fewer states."""

from __future__ import annotations

import kaldifst as kf

from cosyvoiced.tts.frontend.normalize.en_fst import FIRST_STRING
from cosyvoiced.tts.frontend.normalize.grammar_build import fold_chains

# "ab" -> `x{a}b` (weight 1) or `yy{a}{b}` (weight 2), "a" -> `x{a}`; a loop on state 9
# reads any number of "c" around its writes: chains end where a state has two arcs in or
# out, and one arc of a chain at most reads a byte
TEXT = """0 1 0 120 0.5
1 2 0 123 0
2 3 97 97 0
3 4 0 125 0.5
4 5 98 98 0
4 6 0 0 0
0 7 0 121 1
7 8 0 121 0
8 9 0 123 0
9 9 99 99 0
9 10 97 97 0
10 11 0 125 0
11 12 0 123 0
12 13 98 98 0
13 14 0 125 1
5
6
14
"""


def _read(fst: kf.StdVectorFst, text: str, strings: list[bytes]) -> tuple[str, float]:
    lattice = kf.compose(kf.make_linear_acceptor(list(text.encode())), fst, connect=True)
    best = kf.shortest_path(lattice, 1)
    ok, _, olabels, weight = kf.get_linear_symbol_sequence(best)
    assert ok
    labels = [bytes([b]) for b in range(FIRST_STRING)] + strings
    return b"".join(labels[b] for b in olabels if b).decode(), round(weight.value, 3)


def test_folded_paths_read_and_write_what_they_did():
    fst = kf.compile(TEXT, acceptor=False)
    kf.arcsort(fst, "ilabel")
    folded, strings = fold_chains(fst)
    assert folded.num_states < fst.num_states - 4
    assert all(len(s) > 1 for s in strings)
    for text, want in (("ab", ("x{a}b", 1.0)), ("a", ("x{a}", 1.0)),
                       ("ccab", ("yy{cca}{b}", 2.0))):
        assert _read(fst, text, []) == want
        assert _read(folded, text, strings) == want


def test_a_state_two_arcs_reach_is_kept():
    fst = kf.compile("0 1 97 97 0\n0 2 98 98 0\n1 3 0 120 0\n2 3 0 121 0\n3 4 0 122 0\n4\n",
                     acceptor=False)
    kf.arcsort(fst, "ilabel")
    folded, strings = fold_chains(fst)
    assert _read(folded, "a", strings) == ("axz", 0.0)
    assert _read(folded, "b", strings) == ("byz", 0.0)
