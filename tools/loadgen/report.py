"""What a ramp run leaves behind: JSON, a Markdown summary, PNG plots, the run in full in
its section of docs/performance-history.md (between `<!-- loadgen:FAMILY:begin -->` and
`<!-- loadgen:FAMILY:end -->`, or its kind's markers), and its row of the latest figures in
docs/performance.md (the table row marked `<!-- loadgen:FAMILY -->`): one per CPU family."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import re
from pathlib import Path
from typing import Any

from tools.loadgen.ramp import RampResult
from tools.loadgen.stats import (
    RATIO_MAX,
    TTFA_BOUND_MS,
    StepStats,
    slope_per_stream,
    strict_reasons,
)
from tools.quantize.noamx import ENV as NO_AMX_ENV

PLOTS = ("latency.png", "resources.png", "failures.png")
CPU_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_vnni")
"""The CPU flags a run records: what decides which engine `auto` takes (bf16 on AMX or
AVX512-BF16, INT8 with VNNI), so figures of one family compare."""


def machine() -> dict[str, Any]:
    model = ""
    flags: set[str] = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return {"cpu": model, "nproc": os.cpu_count(), "avx512_vnni": "avx512_vnni" in flags,
            "amx_bf16": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags,
            "flags": [f for f in CPU_FLAGS if f in flags],
            "python": platform.python_version(), "kernel": platform.release(),
            "amx_withheld": os.environ.get(NO_AMX_ENV) == "1"}


def cpu_flags(m: dict[str, Any]) -> list[str]:
    """The recorded flags of `CPU_FLAGS` (a run saved before they were: from its booleans)."""
    if "flags" in m:
        return list(m["flags"])
    return [f for f in ("amx_bf16", "avx512_bf16", "avx512_vnni") if m.get(f)]


def cpu_family(m: dict[str, Any]) -> str:
    """Which row of the latest figures a run replaces: `amx`, `avx512_bf16` or `other`."""
    flags = cpu_flags(m)
    return "amx" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags \
        else "other"


def sustained(steps: list[dict[str, Any]], knee: int | None) -> int:
    """Streams of the last step before the knee; 0: none."""
    before = steps[:knee] if knee is not None else steps
    return before[-1]["streams"] if before else 0


def strict_sustained(steps: list[dict[str, Any]]) -> int:
    """Streams of the last step in the unbroken run from the start that met the stricter
    bar (`strict_reasons`); 0: none."""
    best = 0
    for s in steps:
        if strict_reasons(_stats(s)):
            break
        best = s["streams"]
    return best


def _stats(step: dict[str, Any]) -> StepStats:
    """A step of the JSON document back as StepStats (null figures: NaN)."""
    known = {f.name for f in dataclasses.fields(StepStats)}
    return StepStats(**{k: (math.nan if v is None and k not in ("worker_busy",
                                                                  "underruns_by_kind") else v)
                        for k, v in step.items() if k in known})


def pss_slope(steps: list[dict[str, Any]], knee: int | None) -> float:
    """MB of PSS per added stream, fitted over the steps up to the knee (included: its
    streams were still mostly admitted)."""
    fit = steps[:knee + 1] if knee is not None else steps
    return slope_per_stream([s["streams"] for s in fit],
                            [_nan(s["pss_mb"]) for s in fit])


def summarize(ramps: list[RampResult], meta: dict[str, Any]) -> dict[str, Any]:
    """The JSON document, targets included."""
    out: dict[str, Any] = {**meta, "ratio_max": RATIO_MAX, "ttfa_bound_ms": TTFA_BOUND_MS,
                           "ramps": []}
    for r in ramps:
        out["ramps"].append({
            "server": r.server, "mix": r.mix, "profile": dataclasses.asdict(r.profile),
            "steps": [_clean(dataclasses.asdict(s)) for s in r.steps],
            "knee_step": r.knee_step, "knee_reasons": r.knee_reasons,
            "held_knee_step": r.held_knee_step, "errors": r.errors[:10]})
    return derive(out)


def derive(doc: dict[str, Any]) -> dict[str, Any]:
    """Per-ramp figures and the targets, from the steps alone (so a saved run can be
    rendered again with `--render`)."""
    for r in doc["ramps"]:
        steps, knee, held = r["steps"], r["knee_step"], r.get("held_knee_step")
        r["sustained_streams"] = sustained(steps, knee)
        r["sustained_streams_held"] = sustained(steps, held)
        r["sustained_streams_strict"] = strict_sustained(steps)
        r["pss_mb_per_stream"] = _num(pss_slope(steps, knee))
        past = steps[knee:] if knee is not None else []
        r["underruns_past_knee"] = sum(s["underruns"] for s in past)
        r["refused_past_knee"] = sum(s["refused"] for s in past)
    idle = doc.get("idle_calls")
    if idle:  # the upper half of the counts: after the first calls' one-time growth
        half = [i for i, n in enumerate(idle["calls"]) if n >= idle["calls"][-1] / 2]
        idle["mb_per_call"] = _num(slope_per_stream([idle["calls"][i] for i in half],
                                                    [idle["pss_mb"][i] for i in half]))
    doc["targets"] = targets(doc["ramps"], idle, bool(doc.get("machine", {}).get("amx_bf16")),
                             doc.get("text") == "script")
    return doc


def targets(ramps: list[dict[str, Any]], idle: dict[str, Any] | None = None,
            amx: bool = False, script: bool = False) -> list[dict[str, Any]]:
    """The bars: unique text, 1.5x Piper's server and 1.2x wyoming-piper (2x both where
    the CPU runs the bf16 vocoder, `amx`); the call-center script with the prompt cache
    (`script`), 3x the better peer."""
    by = {(r["server"], tuple(r["mix"])): r for r in ramps}
    ours = by.get(("cosyvoiced", ("tts",)))
    peers = [p for p in (by.get(("piper-http", ("piper",))),
                         by.get(("wyoming-piper", ("wyoming",)))) if p]
    out = []
    if ours and peers:
        for p in peers:
            goal = 3.0 if script else 2.0 if amx else 1.5 if p["server"] == "piper-http" \
                else 1.2
            a, b = ours["sustained_streams_held"], p["sustained_streams_held"]
            ratio = a / b if b else (math.inf if a else math.nan)
            out.append({"name": f"cosyvoiced / {p['server']}, concurrent real-time TTS streams "
                                "(same knee, held 2 steps in a row)", "short": f"vs {p['server']}",
                        "value": _num(ratio), "goal": f">= {goal:g}", "ok": ratio >= goal,
                        "detail": f"{a} vs {b}"})
        best = max(peers, key=lambda p: p["sustained_streams_strict"])
        a, b = ours["sustained_streams_strict"], best["sustained_streams_strict"]
        ratio = a / b if b else (math.inf if a else math.nan)
        out.append({"name": "cosyvoiced / the better peer, streams with no gap, nothing "
                            f"refused and first audio p95 <= {TTFA_BOUND_MS / 1000:g} s",
                    "short": "strict",
                    "value": _num(ratio), "goal": ">= 3", "ok": ratio >= 3,
                    "detail": f"{a} vs {b} ({best['server']})"})
    if idle and idle.get("mb_per_call") is not None:
        c, m = idle["calls"], idle["pss_mb"]
        mid = next(i for i, n in enumerate(c) if n >= c[-1] / 2)
        out.append({"name": "PSS growth per added stream, MB (silent calls held open, "
                            f"{c[mid]} to {c[-1]})", "short": "PSS/idle call",
                    "value": idle["mb_per_call"], "goal": "<= 0.5",
                    "ok": idle["mb_per_call"] <= 0.5,
                    "detail": "PSS at " + ", ".join(f"{n} calls {x:.0f} MB"
                                                    for n, x in zip(c, m, strict=True))})
    for r in ramps:
        if r["server"] != "cosyvoiced":
            continue
        slope = _nan(r["pss_mb_per_stream"])
        out.append({"name": f"PSS growth per added stream, MB (mix {_mix(r['mix'])})",
                    "short": f"PSS/stream{_of(r['mix'])}",
                    "value": _num(slope), "goal": "<= 0.5",
                    "ok": not math.isnan(slope) and slope <= 0.5})
        knee = r["knee_step"]
        out.append({"name": f"underruns at and past the knee, load refused instead "
                            f"(mix {_mix(r['mix'])})",
                    "short": f"underruns past the knee{_of(r['mix'])}",
                    "value": r["underruns_past_knee"], "goal": "0, knee reached",
                    "ok": knee is not None and r["underruns_past_knee"] == 0,
                    "detail": "no knee reached" if knee is None else
                    f"knee: {'; '.join(r['knee_reasons'])}; refusals from there on: "
                    f"{r['refused_past_knee']}"})
    return out


def markdown(doc: dict[str, Any], plots_rel: str | None) -> str:
    m = doc["machine"]
    p = doc["profile"]
    lines = [
        f"Measured {doc['date']} on {m['cpu']} ({m['nproc']} CPUs"
        f"{', AVX-512 VNNI' if m['avx512_vnni'] else ''}), Python {m['python']}, with "
        f"load average {doc['loadavg_before']} before the run (other jobs share this "
        f"machine). Profile `{doc['profile_name']}`: {p['start']} streams, "
        f"+{p['step']} every {p['interval_s']:g} s, until the knee. Servers pinned to CPUs "
        f"`{doc['cpus']}`; the load generator runs on the same box"
        + (f"; servers and load generator at nice {doc['nice']} (their session's autogroup "
           "too), to put them before the other jobs on this shared box (how much CPU those "
           "still took is in *others' CPU %*)" if doc.get("nice") is not None else "")
        + (f", the load generator's loop at {doc['loadgen_nice']} while it measures (it stands "
           "for clients on other machines: behind the servers it stamped their audio late)"
           if doc.get("loadgen_nice") is not None else "")
        + (f"; cosyvoiced at commit `{doc['commit']}`" if doc.get("commit") else "")
        + ".", "",
        f"    {doc['command']}", ""]
    lines += headline(doc) + [""]
    lines += [
        "How it is measured (the same for every server): each stream asks for "
        + ("a reply from a call-center script (one of 5 fixed prompts, then a sentence with "
           "a per-caller value; cosyvoiced with its prompt cache on)"
           if doc.get("text") == "script" else
           "an IVR-style reply (3–6 s of speech; cosyvoiced's prompt cache off)")
        + ", reads it as it arrives, and a listener plays it at "
        "real-time pace from its first audio; the next request goes when the listener has "
        "heard it all. *First audio*: request sent to the first audio byte received "
        "(Piper's HTTP server answers with a whole WAV, so its first audio is the body's "
        "first byte; cosyvoiced streams each clause as it is synthesized). An *underrun* is "
        "a gap the listener hears (≥ 5 ms). The *latency ratio* of a reply is (time from the "
        "request until the listener has heard all of it) / (its audio length): 1.0 is real "
        f"time, {RATIO_MAX:g} means as much waiting as speech. The knee, one rule for every "
        f"server: the first step whose p95 latency ratio is above {RATIO_MAX:g}, a refused "
        "or failed request counting as a reply never heard (so a server that refuses and one "
        "that slows down are judged alike; `cosyvoiced-noadmit` is cosyvoiced with its "
        "admission limit out of the way). *Sustained* = streams of the last step before the "
        "knee; the *stricter* figure: the last step with no gap heard, nothing refused or "
        f"failed and first audio p95 ≤ {TTFA_BOUND_MS / 1000:g} s. As a "
        "lone failing step on this shared box can be a blip, the ramp goes on until the knee "
        "holds for 2 steps in a row, and both figures are given. CPU % "
        "is of one core (this box has "
        f"{100 * (m.get('nproc') or 1)} %), summed over the server and its child "
        "processes; PSS likewise (`/proc/PID/smaps_rollup`); *others' CPU %* is what the "
        "rest of the machine used meanwhile (other jobs; the load generator's own CPU is "
        "not in it); *waited for CPU %*: time the server's threads were ready to run but "
        "had no CPU (`/proc/PID/task/*/schedstat`), % of the step, summed over threads."
        + (" Side by side, the servers took turns step by step (all up, one loaded at a "
           "time), so background load fell on each alike." if doc.get("turns") else ""), ""]
    head = ("| server | mix | streams | replies | first audio p50/p95/p99 ms | latency ratio "
            "p95 | transcript p95 ms | underruns | dropped | refused | CPU % | PSS MB | "
            "worker busy | load | others' CPU % | waited for CPU % |")
    lines += [head, "|" + "---|" * 16]
    for r in doc["ramps"]:
        for i, s in enumerate(r["steps"]):
            knee = (" **knee**" if r["knee_step"] == i else "") + \
                (" **held**" if r.get("held_knee_step") == i else "")
            busy = "/".join(f"{b:.2f}" for b in s["worker_busy"]) if s["worker_busy"] else "–"
            lines.append(
                f"| {r['server']} | {_mix(r['mix'])} | {s['streams']}{knee} | {s['replies']} | "
                f"{_f(s['ttfa_p50_ms'])}/{_f(s['ttfa_p95_ms'])}/{_f(s['ttfa_p99_ms'])} | "
                f"{_f(s['ratio_p95'], 2)} | {_f(s['transcript_p95_ms'])} | "
                f"{_underruns(s)} | "
                f"{s['dropped_frames']} | {s['refused']} | {_f(s['cpu_pct'])} | "
                f"{_f(s['pss_mb'])} | {busy} | {_f(s['loadavg_1m'], 1)} | "
                f"{_f(s.get('others_cpu_pct'))} | {_f(s.get('wait_pct'))} |")
    lines += ["", "| ramp | sustained (first failing step) | sustained (knee held 2 steps) | "
              "stricter: no gap, none refused, first audio p95 ≤ 1 s | knee | "
              "PSS MB per stream |",
              "|---|---|---|---|---|---|"]
    for r in doc["ramps"]:
        lines.append(f"| {r['server']} ({_mix(r['mix'])}) | {r['sustained_streams']} | "
                     f"{r['sustained_streams_held']} | {r['sustained_streams_strict']} | "
                     f"{'; '.join(r['knee_reasons']) or 'none (clean finish)'} | "
                     f"{_f(r['pss_mb_per_stream'], 2)} |")
    said = [(r, e) for r in doc["ramps"] for e in r.get("errors", [])[:2]]
    if said:
        lines += ["", "What refusals and failures said (first of each kind):", ""]
        lines += [f"- {r['server']} ({_mix(r['mix'])}): `{e[:200]}`" for r, e in said]
    lines += ["", "Targets:", ""]
    for t in doc["targets"]:
        detail = f" ({t['detail']})" if t.get("detail") else ""
        value = "∞" if t["value"] is None and t["ok"] else _f(t["value"], 2)
        lines.append(f"- {t['name']}: {value}, goal {t['goal']}: "
                     f"**{'ok' if t['ok'] else 'FAIL'}**{detail}")
    if plots_rel is not None:
        lines += [""] + [f"![{n.removesuffix('.png')}]({plots_rel}/{n})" for n in PLOTS]
    return "\n".join(lines) + "\n"


def headline(doc: dict[str, Any]) -> list[str]:
    by = {(r["server"], tuple(r["mix"])): r for r in doc["ramps"]}
    ours = by.get(("cosyvoiced", ("tts",)))
    peers = [by.get(("cosyvoiced-noadmit", ("tts",))), by.get(("piper-http", ("piper",))),
             by.get(("wyoming-piper", ("wyoming",)))]
    if not ours or not any(peers):
        return []
    def vs(key: str) -> str:
        return " and ".join(f"{p[key]} for {p['server']}" for p in peers if p)

    out = [f"**{ours['sustained_streams_held']} concurrent real-time TTS streams on "
           f"cosyvoiced vs {vs('sustained_streams_held')} on the same box** (before a knee "
           f"that held 2 steps in a row; before the first failing step: "
           f"{ours['sustained_streams']} vs {vs('sustained_streams')}; no gap, nothing refused "
           f"and first audio p95 within 1 s: {ours['sustained_streams_strict']} vs "
           f"{vs('sustained_streams_strict')})."]
    side = [ours] + [p for p in peers if p]
    common = set.intersection(*({s["streams"] for s in r["steps"]} for r in side))
    if common:
        n = max(common)
        at = [next(s for s in r["steps"] if s["streams"] == n) for r in side]
        out.append("")
        out.append(f"At {n} streams, the largest step every server ran, first audio p95 / "
                   "latency ratio p95 / underruns: " + "; ".join(
                       f"{r['server']} {_f(s['ttfa_p95_ms'])} ms / {_f(s['ratio_p95'], 2)} / "
                       f"{s['underruns']}" for r, s in zip(side, at, strict=True)) + ".")
    return out


def plots(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    specs = {
        "latency.png": [("first audio (ms)", ("ttfa_p50_ms", "ttfa_p95_ms", "ttfa_p99_ms"), True),
                        ("latency ratio p95", ("ratio_p95",), False)],
        "resources.png": [("CPU % (of one core)", ("cpu_pct",), False),
                          ("PSS (MB)", ("pss_mb",), False)],
        "failures.png": [("underruns", ("underruns",), False),
                         ("refusals", ("refused",), False)],
    }
    styles = ("-", "--", ":")
    written = []
    for name, panels in specs.items():
        fig, axes = plt.subplots(1, len(panels), figsize=(9, 4.2), dpi=80)
        for ax, (title, keys, logy) in zip(axes, panels, strict=True):
            for ci, r in enumerate(doc["ramps"]):
                color = colors[ci % len(colors)]
                xs = [s["streams"] for s in r["steps"]]
                for key, style in zip(keys, styles, strict=False):
                    ys = [_nan(s[key]) for s in r["steps"]]
                    label = f"{r['server']} ({_mix(r['mix'])})" + \
                        (f" {key.split('_')[1]}" if len(keys) > 1 else "")
                    ax.plot(xs, ys, style, marker="o", markersize=3, color=color, label=label)
                if r["knee_step"] is not None:
                    ax.axvline(xs[r["knee_step"]], color=color, alpha=0.5, linewidth=1)
            if "ratio_p95" in keys:
                ax.axhline(RATIO_MAX, color="grey", linestyle="--", linewidth=1)
            if logy:
                ax.set_yscale("log")
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("concurrent streams (vertical line: knee)", fontsize=8)
            ax.tick_params(labelsize=7)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=6, frameon=False)
        fig.tight_layout(rect=(0, 0.01 + 0.04 * (1 + (len(labels) - 1) // 4), 1, 1))
        path = out_dir / name
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def cpu_name(model: str) -> str:
    """/proc/cpuinfo's model name without its trademark signs and "Processor"."""
    return " ".join(re.sub(r"\((R|TM)\)|\bProcessor\b", "", model).split())


def row(doc: dict[str, Any], label: str, link: str) -> list[str]:
    """The run's cells in the table of latest figures (docs/performance.md): what ran, the
    CPU and its flags, date and commit linked to the run in full (`link`), cosyvoiced's
    sustained streams (strict in brackets), the peers' in the same run, the targets."""
    m = doc.get("machine", {})
    flags = cpu_flags(m)
    cpu = f"{cpu_name(m.get('cpu', '')) or 'CPU not recorded'} ({' '.join(flags) or 'no AVX512-BF16'}" \
        + ("" if "amx_bf16" in flags else ", no AMX") + ")"
    run = f"[{doc.get('date', 'date not recorded')}, {doc.get('commit') or 'commit not recorded'}]" \
        f"({link})"

    def streams(r: dict[str, Any]) -> str:
        name = r["server"]
        if name == "cosyvoiced-noadmit":
            name = "admission off"
        elif name == "cosyvoiced" and tuple(r["mix"]) != ("tts",):
            name = f"the mix {_mix(r['mix'])}"
        return f"{name} {r['sustained_streams_held']} (strict {r['sustained_streams_strict']})"

    ours = [streams(r) for r in doc["ramps"] if r["server"].startswith("cosyvoiced")]
    peers = [streams(r) for r in doc["ramps"] if not r["server"].startswith("cosyvoiced")]
    targets = [f"{t.get('short', t['name'])} "
               f"{'∞' if t['value'] is None and t['ok'] else _f(t['value'], 2)} ({t['goal']}) "
               + ("ok" if t["ok"] else "**FAIL**") for t in doc["targets"]]
    cells = [label, cpu, run, "; ".join(ours) or "–", "; ".join(peers) or "–",
             "; ".join(targets) or "–"]
    return [c.replace("|", "/").replace("\n", " ") for c in cells]


def row_marker(name: str, family: str) -> str:
    """Marks the row of a ramp's kind (`loadgen`, `loadgen-tts`, ...) for one CPU family."""
    return f"<!-- {name}:{family} -->"


def update_row(page: Path, name: str, family: str, cells: list[str]) -> None:
    """Replace the table row of `page` that carries the marker of `name` and `family`;
    with no row of that family yet, add one after the last row of `name` (so a page holds
    one row per kind and family, whatever the number of runs)."""
    marker = row_marker(name, family)
    line = f"| {marker} {cells[0]} | " + " | ".join(cells[1:]) + " |"
    lines = page.read_text().split("\n")
    rows = [i for i, text in enumerate(lines) if text.startswith("|")]
    mine = [i for i in rows if marker in lines[i]]
    if mine:
        lines[mine[0]] = line
    else:
        kin = [i for i in rows if f"<!-- {name}:" in lines[i]]
        if not kin:
            raise ValueError(f"{page}: no table row marked {row_marker(name, '...')}")
        lines.insert(kin[-1] + 1, line)
    page.write_text("\n".join(lines))


def markers(name: str = "loadgen") -> tuple[str, str]:
    """The begin and end markers of a ramp's section (`loadgen`, or `loadgen-script` for the
    call-center script mix)."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def update_docs(doc: Path, section: str, name: str = "loadgen", kin: str | None = None) -> None:
    """Replace what is between the markers `name` of `doc` (both there, in order). Without
    them, a new section goes after the last one whose name starts with `kin` + ":" (another
    CPU family's run of the same ramp)."""
    begin, end = markers(name)
    text = doc.read_text()
    pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pat.search(text):
        ends = list(re.finditer(re.escape(f"<!-- {kin}:") + r"[^>]*:end -->", text)) if kin else []
        if not ends:
            raise ValueError(f"{doc}: no {begin} ... {end} markers")
        at = ends[-1].end()
        text = f"{text[:at]}\n\n{begin}\n{end}{text[at:]}"
    doc.write_text(pat.sub(lambda _m: f"{begin}\n{section}{end}", text, count=1))


def write_json(doc: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(doc, indent=2, allow_nan=False, default=str) + "\n")


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (_num(v) if isinstance(v, float) else v) for k, v in d.items()}


def _num(v: float) -> float | None:
    """JSON has no NaN/inf: they become null."""
    return None if v is None or math.isnan(v) or math.isinf(v) else round(v, 4)


def _nan(v: float | None) -> float:
    return math.nan if v is None else v


def _f(v: float | None, digits: int = 0) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _underruns(step: dict[str, Any]) -> str:
    """"3 (tts 1, call (daemon) 2)" when the underruns came from more than one place."""
    by = step.get("underruns_by_kind") or {}
    if not step["underruns"] or len(by) < 2 and set(by) <= {"tts", "piper", "wyoming"}:
        return str(step["underruns"])
    return f"{step['underruns']} ({', '.join(f'{k} {v}' for k, v in by.items())})"


def _of(mix: dict[str, float]) -> str:
    """" (tts=2,call=1)": which ramp a target is of, said only for a mix other than TTS only."""
    return "" if tuple(mix) == ("tts",) else f" ({_mix(mix)})"


def _mix(mix: dict[str, float]) -> str:
    return ",".join(f"{k}={v:g}" for k, v in mix.items())
