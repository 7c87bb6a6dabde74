// The Calls panel: the live AudioSocket calls (GET /v1/calls), polled while the page is
// visible, each with a button that hangs it up.
import { call, getJson } from "./api.js";

export const POLL_MS = 2000;
const FRAME_S = 0.02; // one AudioSocket frame
const $ = (id) => document.getElementById(id);

export class CallsPanel {
  constructor() {
    this.timer = null;
    this.off = false;
    document.addEventListener("visibilitychange", () => this.schedule(0));
  }

  schedule(ms = POLL_MS) {
    clearTimeout(this.timer);
    if (!document.hidden && !this.off) this.timer = setTimeout(() => this.poll(), ms);
  }

  message(text, isError = false) {
    $("calls-msg").textContent = text;
    $("calls-msg").classList.toggle("error", isError);
  }

  async poll() {
    try {
      this.show((await getJson("/v1/calls")).calls);
    } catch (err) {
      if (err.status === 401) return; // the login is shown
      if (err.status === 404) {
        this.off = true;
        this.message("Phone calls are off on this daemon (audiosocket.enabled).");
        return;
      }
      this.message(`Calls unavailable: ${err.message}`, true);
    }
    this.schedule();
  }

  show(calls) {
    const rows = calls.map((c) => {
      const tr = document.createElement("tr");
      tr.dataset.call = c.id;
      const cells = [c.id.slice(0, 8), `${c.format} ${c.rate_hz / 1000} kHz`,
        c.speaking ? "speaking" : "listening", String(c.barge_ins),
        `${Math.round((c.frames_sent + c.comfort_frames) * FRAME_S)} s`];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.append(td);
      }
      tr.firstChild.title = c.id;
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = "Hang up";
      button.setAttribute("aria-label", `Hang up call ${c.id.slice(0, 8)}`);
      button.addEventListener("click", () => this.hangup(c.id, button));
      const td = document.createElement("td");
      td.append(button);
      tr.append(td);
      return tr;
    });
    $("calls-rows").replaceChildren(...rows);
    $("calls-table").hidden = !calls.length;
    this.message(calls.length ? "" : "No call right now.");
    $("calls").dataset.polls = String(Number($("calls").dataset.polls || 0) + 1);
  }

  async hangup(id, button) {
    button.disabled = true;
    try {
      await call(`/v1/calls/${encodeURIComponent(id)}/hangup`, { method: "POST" });
    } catch (err) {
      if (err.status !== 404) this.message(`Could not hang up: ${err.message}`, true);
    }
    this.schedule(0);
  }
}
