// The Speak panel: text in, audio heard as it streams, each word lit as it is heard.
import { call, events, getJson } from "./api.js";
import { save, vtt, wavBlob } from "./files.js";
import { Player } from "./player.js";

const RATE_HZ = 24000; // /v1/audio/speech's pcm: 24 kHz s16le mono
const $ = (id) => document.getElementById(id);

function pcmOf(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length - (bin.length % 2));
  for (let i = 0; i < bytes.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Int16Array(bytes.buffer);
}

export class SpeakPanel {
  constructor() {
    this.root = $("speak");
    this.player = new Player(RATE_HZ);
    this.abort = null;
    this.pcm = [];
    this.words = [];
    this.heard = []; // word indices in the order they were lit
    this.request = null; // what was asked: the download repeats it in another format
    $("speak-form").addEventListener("submit", (e) => { e.preventDefault(); this.speak(); });
    $("text").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.speak(); }
    });
    $("speed").addEventListener("input", () => { $("speed-out").value = `${Number($("speed").value).toFixed(1)}x`; });
    $("speak-stop").addEventListener("click", () => this.stop("stopped"));
    $("download").addEventListener("click", () => this.download());
    $("subtitles").addEventListener("click", () => save(vtt(this.words), "speech.vtt"));
    // the audio context starts at the first key or button pressed in this panel (browsers
    // let it run only after one), not at Speak: the first Speak then waits for no device
    const prime = () => this.player.open().catch(() => { /* tried again at Speak */ });
    for (const type of ["pointerdown", "keydown"]) this.root.addEventListener(type, prime, { once: true });
  }

  /** The voice list from the daemon (its voices, then OpenAI's names and what each
   * speaks with); what was picked stays picked while the daemon still has it. */
  async loadVoices() {
    const { voices } = await getJson("/v1/audio/voices");
    const pick = $("voice"), was = pick.value;
    pick.replaceChildren(new Option("Default (tts.voice)", ""),
      ...voices.map((v) => new Option(v.name, v.id, false, v.id === was)));
    pick.dataset.voices = String(voices.length);
  }

  message(text, isError = false) {
    $("speak-msg").textContent = text;
    $("speak-msg").classList.toggle("error", isError);
  }

  mark(state, extra = {}) {
    this.root.dataset.state = state;
    Object.assign(this.root.dataset, extra);
  }

  async speak() {
    const t0 = performance.now();
    this.stop();
    const input = $("text").value;
    const voice = $("voice").value;
    this.request = { model: "tts-1", input, speed: Number($("speed").value) };
    if (voice) this.request.voice = voice;
    const abort = this.abort = new AbortController();
    // the request goes first: the page's own work below runs while the daemon synthesizes
    const sent = call("/v1/audio/speech", {
      method: "POST", signal: abort.signal,
      json: { ...this.request, response_format: "pcm", stream_format: "sse" },
    });
    const opened = this.player.open(); // a context not yet running resumes meanwhile
    document.body.dataset.speaking = String(t0); // the panels' polls wait for the first audio
    this.pcm = []; this.words = []; this.heard = [];
    // the last words stay until this request's first word: the page does not reflow while
    // the daemon makes the first audio (on a box shared with the daemon, drawing competes)
    for (const id of ["fig-first", "fig-rtf", "fig-audio"]) $(id).textContent = "–";
    $("download").disabled = $("subtitles").disabled = true;
    $("speak-stop").disabled = false;
    this.player.reset();
    for (const k of Object.keys(this.root.dataset)) delete this.root.dataset[k];
    this.mark("speaking");
    this.message("Speaking…");
    this.t0 = t0;
    const run = this.run = (this.run || 0) + 1;
    this.stamps = {};
    this.stamp("fetch", { context: this.player.ctx.state });
    opened.then(() => this.stamp("opened", { latencyMs: (this.player.latencyS * 1000).toFixed(1) }), () => {});
    try {
      const resp = await sent;
      this.stamp("headers", { serverFirstAudioMs: resp.headers.get("X-Time-To-First-Audio-Ms") });
      await opened;
      this.tick(run);
      for await (const ev of events(resp, () => this.stamp("bytes"))) {
        if (ev.type === "speech.audio.delta") this.audio(pcmOf(ev.audio), t0);
        else if (ev.type === "speech.word") this.word(ev);
        else if (ev.type === "error") throw Object.assign(new Error(ev.error.message), { code: ev.error.code });
      }
      const tookMs = performance.now() - t0;
      const audioS = this.player.seconds;
      if (!this.words.length) $("words").replaceChildren();
      this.mark("streamed", { responseEndedMs: tookMs.toFixed(1), synthS: audioS.toFixed(4) });
      $("fig-audio").textContent = `${audioS.toFixed(2)} s`;
      $("fig-rtf").textContent = audioS ? (tookMs / 1000 / audioS).toFixed(3) : "–";
      $("download").disabled = !this.pcm.length;
      $("subtitles").disabled = !this.words.length;
      this.player.finish(() => this.done());
    } catch (err) {
      if (err.name === "AbortError") return;
      this.player.stop();
      if (!this.words.length) $("words").replaceChildren();
      this.mark("error", { error: err.code || "error" });
      this.message(`Could not speak: ${err.message}${err.code ? ` (${err.code})` : ""}`, true);
      $("speak-stop").disabled = true;
      $("download").disabled = !this.pcm.length;
    } finally {
      if (this.abort === abort) this.abort = null;
      if (this.run === run) delete document.body.dataset.speaking;
    }
  }

  audio(pcm, t0) {
    const first = !this.pcm.length;
    if (first) {
      const ms = performance.now() - t0;
      $("fig-first").textContent = `${ms.toFixed(0)} ms`;
      this.mark("speaking", { firstAudioMs: ms.toFixed(1) });
    }
    this.pcm.push(pcm);
    this.player.push(pcm);
    if (first) {
      this.stamp("scheduled", { leadMs: (this.player.leadS * 1000).toFixed(1) });
      delete document.body.dataset.speaking;
    }
  }

  /** Where the first sound's time went (the console bench reads it): `name` once, in ms
   * from the click, with any figures in `extra`. */
  stamp(name, extra = {}) {
    if (name in this.stamps) return;
    this.stamps[name] = (performance.now() - this.t0).toFixed(1);
    Object.assign(this.stamps, extra);
    this.root.dataset.profile = JSON.stringify(this.stamps);
  }

  word(ev) {
    if (!this.words.length) $("words").replaceChildren();
    const span = document.createElement("span");
    span.textContent = ev.text;
    span.dataset.i = this.words.length;
    this.words.push({ text: ev.text, start: ev.start, end: ev.end });
    $("words").append(span, " ");
  }

  /** Each frame while audio plays: note when it is first heard, light the word heard. */
  tick(run) {
    const player = this.player;
    const step = () => {
      const state = this.root.dataset.state;
      if (run !== this.run || state === "error" || state === "stopped") return;
      const pos = player.position();
      if (pos >= 0 && !this.root.dataset.audioStartedMs) {
        const at = player.firstSoundMs !== null ? Math.min(player.firstSoundMs, performance.now()) : performance.now();
        this.root.dataset.audioStartedMs = (at - this.t0).toFixed(1);
      }
      const spans = $("words").children;
      while (this.heard.length < this.words.length && this.words[this.heard.length].start <= pos) {
        const i = this.heard.length;
        if (i > 0) spans[i - 1].className = "heard";
        spans[i].className = "now";
        this.heard.push(i);
        this.root.dataset.heard = this.heard.join(",");
      }
      if (state !== "done") requestAnimationFrame(step);
      else if (spans.length) spans[spans.length - 1].className = "heard";
    };
    requestAnimationFrame(step);
  }

  done() {
    const p = this.player;
    this.mark("done", { playedS: (p.endedAt - p.startedAt).toFixed(4), gaps: String(p.gaps) });
    this.message(`Done: ${p.seconds.toFixed(2)} s of audio.`);
    $("speak-stop").disabled = true;
  }

  stop(state) {
    if (this.abort) { this.abort.abort(); this.abort = null; }
    this.player.stop();
    $("speak-stop").disabled = true;
    if (state) { this.mark(state); this.message("Stopped."); }
  }

  async download() {
    const fmt = $("format").value;
    if (fmt === "wav") { save(wavBlob(this.pcm, RATE_HZ), "speech.wav"); return; }
    try {
      this.message(`Making ${fmt}…`);
      const resp = await call("/v1/audio/speech", {
        method: "POST", json: { ...this.request, response_format: fmt },
      });
      save(await resp.blob(), `speech.${fmt === "opus" ? "ogg" : fmt}`);
      this.message(`Saved speech.${fmt === "opus" ? "ogg" : fmt}.`);
    } catch (err) {
      this.message(`Could not download: ${err.message}`, true);
    }
  }
}
