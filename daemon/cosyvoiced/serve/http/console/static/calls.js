// The Calls panel: the live AudioSocket calls (GET /v1/calls), asked again at once on
// each event of the calls' WebSocket and polled while the page is visible, each with a
// button that hangs it up; a box to say something into a call or stop it; notes of
// barge-ins and (when asked for, signed in) what was said.
import { call, getJson, openSocket, token } from "./api.js";
import { CallNotes, noteFor } from "./callnotes.js";
import { BUSY_MS, speaking } from "./status.js";

export const POLL_MS = 2000;
const LIVE_POLL_MS = 5000; // while the event WebSocket is up
const RECONNECT_MS = 3000;
const FRAME_S = 0.02; // one AudioSocket frame
const $ = (id) => document.getElementById(id);

export class CallsPanel {
  constructor() {
    this.timer = null;
    this.off = false;
    this.ws = null;
    this.retry = null;
    this.stopped = false;
    this.notes = new CallNotes($("call-notes"));
    document.addEventListener("visibilitychange", () => this.schedule(0));
    $("say-form").addEventListener("submit", (e) => { e.preventDefault(); this.say(); });
    $("say-stop").addEventListener("click", () => this.act("stop"));
    $("call-text").addEventListener("change", () => this.textAllowed());
  }

  /** Words and transcripts show only when the box is ticked and the page has the token. */
  textAllowed() {
    const signedIn = Boolean(token());
    $("call-text").disabled = !signedIn;
    $("call-text-why").hidden = signedIn;
    return signedIn && $("call-text").checked;
  }

  event(ev) {
    const calls = $("calls");
    if (ev.type === "transcript") calls.dataset.transcripts = String(Number(calls.dataset.transcripts || 0) + 1);
    const note = noteFor(ev, this.textAllowed());
    if (note) this.notes.add(note);
  }

  start() {
    this.stopped = false;
    this.poll();
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    clearTimeout(this.retry);
    if (this.ws) this.ws.close();
  }

  /** At once, not at the next retry (the daemon answers again). */
  reconnect() {
    clearTimeout(this.retry);
    this.connect();
  }

  /** The calls' events: any of them (a call started, ended, barged in) asks for the list. */
  connect() {
    if (this.off || this.stopped || this.ws) return;
    const ws = this.ws = openSocket("/v1/calls/events");
    ws.onopen = () => {
      $("calls").dataset.socket = "open";
      if ($("calls-msg").textContent.startsWith("Live call events lost")) this.message("");
    };
    ws.onmessage = (e) => {
      $("calls").dataset.live = "1";
      this.event(JSON.parse(e.data));
      this.schedule(50);
    };
    ws.onclose = () => {
      this.ws = null;
      $("calls").dataset.socket = "closed";
      if ($("calls").dataset.live === "1") this.message("Live call events lost; reconnecting…", true);
      $("calls").dataset.live = "0";
      if (!this.stopped) this.retry = setTimeout(() => this.connect(), RECONNECT_MS);
    };
  }

  schedule(ms = this.ws && $("calls").dataset.live === "1" ? LIVE_POLL_MS : POLL_MS) {
    clearTimeout(this.timer);
    if (!document.hidden && !this.off && !this.stopped) this.timer = setTimeout(() => this.poll(), ms);
  }

  message(text, isError = false) {
    $("calls-msg").textContent = text;
    $("calls-msg").classList.toggle("error", isError);
  }

  async poll() {
    if (speaking()) { this.schedule(BUSY_MS); return; }
    try {
      this.show((await getJson("/v1/calls")).calls);
    } catch (err) {
      if (err.status === 401) return; // the login is shown
      if (err.status === 404) {
        this.off = true;
        if (this.ws) this.ws.close();
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
    const pick = $("say-call"), was = pick.value;
    pick.replaceChildren(...calls.map((c) => new Option(c.id.slice(0, 8), c.id, false, c.id === was)));
    $("say-form").hidden = !calls.length;
    $("calls-table").hidden = !calls.length;
    if (!calls.length) this.message("No call right now.");
    else if ($("calls-msg").textContent === "No call right now.") this.message(""); // keep what a say or stop answered
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

  async say() {
    const text = $("say-text").value.trim();
    if (!text || !$("say-call").value) return;
    await this.act("say", { text });
  }

  async act(what, json) {
    const id = $("say-call").value;
    if (!id) return;
    try {
      await call(`/v1/calls/${encodeURIComponent(id)}/${what}`, { method: "POST", json: json || {} });
      this.message(what === "say" ? "Saying it into the call." : "Stopped.");
    } catch (err) {
      this.message(`Could not ${what}: ${err.message}`, true);
    }
    this.schedule(0);
  }
}
