// The Status panel: the daemon's own JSON status, /readyz and /metrics, polled while the
// page is visible, with the last minutes plotted.
import { call, getJson } from "./api.js";
import { Plot } from "./plot.js";

export const POLL_MS = 3000;
const KEEP = 100; // 5 minutes of polls
export const BUSY_MS = 250; // a poll due while Speak awaits its first audio waits this long,
const HOLD_MAX_MS = 2000; // but no longer than this after Speak

/** Is Speak awaiting its first audio (the panels' polls would compete with it)? */
export function speaking() {
  const since = document.body.dataset.speaking;
  return since !== undefined && performance.now() - Number(since) < HOLD_MAX_MS;
}
const $ = (id) => document.getElementById(id);

/** Prometheus text as {name: [{labels, value}]} (comments skipped). */
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...(m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)]
      .map((x) => [x[1], x[2]]));
    (out[m[1]] ||= []).push({ labels, value: Number(m[3]) });
  }
  return out;
}

const sum = (metrics, name) => (metrics[name] || []).reduce((a, s) => a + s.value, 0);

/** The 95th percentile of what a histogram counted between two scrapes (null: nothing). */
export function p95(before, after, name) {
  const counts = (m) => Object.fromEntries((m[`${name}_bucket`] || []).map((s) => [s.labels.le, s.value]));
  const a = counts(before), b = counts(after);
  const les = Object.keys(b).sort((x, y) => Number(x.replace("+Inf", "Infinity")) -
    Number(y.replace("+Inf", "Infinity")));
  const total = (b["+Inf"] || 0) - (a["+Inf"] || 0);
  if (total <= 0) return null;
  for (const le of les) {
    if ((b[le] || 0) - (a[le] || 0) >= 0.95 * total) return Number(le.replace("+Inf", "Infinity"));
  }
  return null;
}

export class StatusPanel {
  constructor() {
    this.plots = {
      capacity: new Plot($("plot-capacity"), { keep: KEEP, max: 100 }),
      streams: new Plot($("plot-streams"), { keep: KEEP }),
      first: new Plot($("plot-first"), { keep: KEEP }),
    };
    this.metrics = null;
    this.lastFirst = null; // the last p95 known: polls with no request in between have none
    this.timer = null;
    document.addEventListener("visibilitychange", () => this.schedule(0));
  }

  schedule(ms = POLL_MS) {
    clearTimeout(this.timer);
    if (!document.hidden) this.timer = setTimeout(() => this.poll(), ms);
  }

  async poll() {
    if (speaking()) { this.schedule(BUSY_MS); return; }
    try {
      const [status, ready, text] = await Promise.all([
        getJson("/v1/status"),
        call("/readyz").catch((err) => err), // 503 while starting, draining or full
        call("/metrics").then((r) => r.text()),
      ]);
      const cap = ready instanceof Response ? await ready.json() : null;
      this.show(status, cap, parseMetrics(text));
      $("status-msg").textContent = "";
      $("status-msg").classList.remove("error");
    } catch (err) {
      if (err.status === 401) return; // the login is shown; polling starts again after it
      $("status-msg").textContent = `Status unavailable: ${err.message}`;
      $("status-msg").classList.add("error");
    }
    this.schedule();
  }

  show(status, cap, metrics) {
    const workers = status.workers;
    const list = (workers && workers.workers) || [];
    $("st-state").textContent = status.state;
    $("st-version").textContent = status.version;
    $("st-workers").textContent = workers
      ? `${list.filter((w) => w.alive).length}/${list.length} up, restarts ${workers.restarts}` : "none";
    $("st-capacity").textContent = cap
      ? `${Math.round(cap.spare * 100)}% spare, ${cap.max_calls} calls max` : "not ready";
    $("st-capacity").title = cap ? cap.agent : "";
    $("st-streams").textContent = `${status.streams.active}/${status.streams.max}`;
    const engines = [...new Set(list.map((w) => w.engine).filter(Boolean))];
    $("st-engine").textContent = engines.length ? engines.join(", ") : "not reported";
    $("st-xruns").textContent = `${sum(metrics, "cosyvoiced_xruns_total")} / ` +
      `${sum(metrics, "cosyvoiced_underruns_total")}`;
    $("st-refused").textContent = String(sum(metrics, "cosyvoiced_admissions_refused_total"));
    const spare = cap ? Math.round(cap.spare * 100) : 0;
    const first = this.metrics ? p95(this.metrics, metrics, "cosyvoiced_tts_first_audio_seconds") : null;
    this.metrics = metrics;
    if (first !== null) this.lastFirst = first;
    this.plots.capacity.add(spare);
    this.plots.streams.add(status.streams.active);
    this.plots.first.add(first === null ? null : first * 1000);
    $("plot-capacity-now").textContent = `(${spare}%)`;
    $("plot-streams-now").textContent = `(${status.streams.active})`;
    if (this.lastFirst !== null) $("plot-first-now").textContent = `(≤ ${Math.round(this.lastFirst * 1000)})`;
    $("status").dataset.polls = String(Number($("status").dataset.polls || 0) + 1);
  }
}
