"""Our call-center sentences (tests/data/callcenter_tn_en/), read on NeMo's grammars.

The pass rate is printed with every failure; the test fails below 97% (issue 44). Known
failures (marked `~!why` in the file) count as failures and are listed apart; one that
passes fails the test, so its mark is removed.
"""

from __future__ import annotations

from cosyvoiced.testing.tn_cases import load_callcenter, matches
from cosyvoiced.tts.frontend.normalize import normalize_text

GOAL = 0.97



def test_callcenter_sentences_read_as_agents_say_them(grammars, capsys):
    cases = load_callcenter()
    assert len(cases) >= 200
    failed, known, fixed = [], [], []
    for case, why in cases:
        got = normalize_text(case.written)
        ok = matches(got, case)
        if why and ok:
            fixed.append(case.written)
        elif not ok:
            (known if why else failed).append(
                f"{case.written!r} -> {got!r} (want {case.spoken[0]!r}){' [' + why + ']' if why else ''}")
    rate = 1 - (len(failed) + len(known)) / len(cases)
    with capsys.disabled():
        print(f"\n  call-center set: {len(cases) - len(failed) - len(known)}/{len(cases)} "
              f"{rate:.1%} ({len(known)} known failures)")
        for line in [*failed, *known]:
            print("   ", line)
    assert not fixed, f"known failures that now pass (drop their mark): {fixed}"
    assert rate >= GOAL, "\n".join([*failed, *known])
