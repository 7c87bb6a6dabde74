// The Listen panel: the microphone to a live transcript over `GET /v1/stream` (s16le at
// 16 kHz in; voice and transcript events, with word times, out), a level meter and the
// VAD's state; and a file sent to `POST /v1/audio/transcriptions`.
import { call, openSocket } from "./api.js";

export const RATE_HZ = 16000;
const MAX_FINALS = 50;
const $ = (id) => document.getElementById(id);

/** One transcript line: each word a span whose title is its time in the stream. */
export function transcriptLine(text, words) {
  const li = document.createElement("li");
  if (!words || !words.length) {
    li.textContent = text.trim();
    return li;
  }
  words.forEach((w, i) => {
    const span = document.createElement("span");
    span.textContent = w.word.trim();
    span.title = `${w.start.toFixed(2)}–${w.end.toFixed(2)} s`;
    li.append(span, i < words.length - 1 ? " " : "");
  });
  return li;
}

export class ListenPanel {
  constructor() {
    this.ws = null;
    this.media = null;
    this.ctx = null;
    this.speechSince = 0;
    this.timer = null;
    $("listen-go").addEventListener("click", () => this.start());
    $("listen-stop").addEventListener("click", () => this.stop());
    $("upload-form").addEventListener("submit", (e) => { e.preventDefault(); this.upload(); });
  }

  message(text, isError = false) {
    $("listen-msg").textContent = text;
    $("listen-msg").classList.toggle("error", isError);
  }

  state(value) {
    $("listen").dataset.state = value;
    $("listen-go").disabled = value === "live" || value === "starting";
    $("listen-stop").disabled = value !== "live";
  }

  async start() {
    this.state("starting");
    this.message("Asking for the microphone…");
    try {
      this.media = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: false } });
      try {
        this.ctx = new AudioContext({ sampleRate: RATE_HZ }); // the browser resamples
      } catch {
        this.ctx = new AudioContext(); // the worklet averages down instead
      }
      await this.ctx.audioWorklet.addModule("/console/listen-worklet.js");
    } catch (err) {
      this.release();
      this.state("error");
      this.message(`No microphone: ${err.message}`, true);
      return;
    }
    const node = new AudioWorkletNode(this.ctx, "capture", { processorOptions: { rateHz: RATE_HZ } });
    this.ctx.createMediaStreamSource(this.media).connect(node);
    const ws = this.ws = openSocket(`/v1/stream?rate_hz=${RATE_HZ}&words=true`);
    ws.onmessage = (e) => this.event(JSON.parse(e.data));
    ws.onclose = () => {
      if (this.ws === ws) this.ended($("listen").dataset.state === "live" ? "The stream was closed." : "");
    };
    node.port.onmessage = (e) => {
      $("level").value = Math.max(-60, e.data.db);
      if (e.data.db > -50) $("listen").dataset.sound = "1";
      if (ws.readyState === WebSocket.OPEN) ws.send(e.data.pcm);
    };
  }

  event(ev) {
    if (ev.type === "ready") {
      this.state("live");
      this.message("Listening. Speak, then press Stop.");
    } else if (ev.type === "voice_started") {
      $("vad").textContent = "speech";
      $("vad").classList.add("on");
      this.speechSince = performance.now();
      clearInterval(this.timer);
      this.timer = setInterval(() => {
        $("partial").textContent = `Hearing speech… ${((performance.now() - this.speechSince) / 1000).toFixed(1)} s`;
      }, 250);
    } else if (ev.type === "voice_stopped") {
      $("vad").textContent = "silence";
      $("vad").classList.remove("on");
      clearInterval(this.timer);
      $("partial").textContent = "Transcribing…";
    } else if (ev.type === "transcript") {
      $("partial").textContent = "";
      if (!ev.text.trim()) return;
      const list = $("transcript");
      list.append(transcriptLine(ev.text, ev.words));
      while (list.children.length > MAX_FINALS) list.firstChild.remove();
      $("listen").dataset.finals = String(list.children.length);
    } else if (ev.type === "error") {
      this.message(`Stream error: ${ev.error.message} (${ev.error.code})`, true);
    } else if (ev.type === "ended") {
      this.ended("");
    }
  }

  stop() {
    this.state("stopping");
    this.message("Transcribing what is left…");
    this.release(false);
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: "end" }));
    else this.ended("");
  }

  ended(problem) {
    this.release();
    this.ws = null;
    clearInterval(this.timer);
    $("partial").textContent = "";
    $("vad").textContent = "off";
    $("vad").classList.remove("on");
    this.state(problem ? "error" : "stopped");
    this.message(problem || "Stopped.", Boolean(problem));
  }

  release(closeSocket = true) {
    if (this.media) this.media.getTracks().forEach((t) => t.stop());
    if (this.ctx) this.ctx.close();
    this.media = this.ctx = null;
    $("level").value = -60;
    if (closeSocket && this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close();
  }

  async upload() {
    const file = $("upload").files[0];
    if (!file) return;
    const form = new FormData();
    form.append("file", file);
    form.append("model", "whisper-1");
    form.append("response_format", "verbose_json");
    form.append("timestamp_granularities[]", "word");
    $("upload-go").disabled = true;
    $("listen").dataset.upload = "busy";
    this.message(`Transcribing ${file.name}…`);
    try {
      const got = await (await call("/v1/audio/transcriptions", { method: "POST", body: form })).json();
      const out = $("upload-text");
      out.replaceChildren(...transcriptLine(got.text, got.words).childNodes);
      this.message(`${file.name}: ${got.duration.toFixed(1)} s of audio.`);
      $("listen").dataset.upload = "done";
    } catch (err) {
      this.message(`Could not transcribe: ${err.message} (${err.code})`, true);
      $("listen").dataset.upload = "error";
    } finally {
      $("upload-go").disabled = false;
    }
  }
}
