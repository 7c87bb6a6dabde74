// Plays 16-bit PCM chunks as they arrive: each one scheduled right after the last on
// one Web Audio clock, so the first is heard before the rest has come.
const LEAD_S = 0; // the first chunk at once (a start already past plays at once, whole)

export class Player {
  constructor(rateHz) {
    this.rateHz = rateHz;
    this.ctx = null;
    this.reset();
  }

  reset() {
    this.chunks = []; // {at, offset, dur}: context time, stream time, seconds
    this.sources = [];
    this.nextAt = 0;
    this.samples = 0;
    this.gaps = 0; // chunks that came after the audio before them had run out
    this.endedAt = null; // context time the last scheduled chunk ended
    this.firstSoundMs = null; // performance.now() time the first chunk reaches the output
    this.leadS = 0; // how far ahead of the context's time the first chunk was started
    this.onended = null;
  }

  /** Seconds from a sound being started to its reaching the output, as the context says. */
  get latencyS() { return this.ctx ? this.ctx.baseLatency + (this.ctx.outputLatency || 0) : 0; }

  async open() {
    if (!this.ctx) this.ctx = new AudioContext({ latencyHint: 0 }); // the least the device allows
    if (this.ctx.state !== "running") await this.ctx.resume();
  }

  /** Queue `pcm` (Int16Array, mono) after what is queued. */
  push(pcm) {
    const ctx = this.ctx;
    const buf = ctx.createBuffer(1, pcm.length, this.rateHz);
    const out = buf.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) out[i] = pcm[i] / 32768;
    const now = ctx.currentTime;
    let at = this.chunks.length ? this.nextAt : now + LEAD_S;
    if (at < now) { this.gaps++; at = now + 0.01; }
    const src = ctx.createBufferSource();
    src.buffer = buf;
    src.connect(ctx.destination);
    src.start(at);
    if (!this.chunks.length) {
      this.leadS = at - now;
      const ts = ctx.getOutputTimestamp(); // what the output plays now, on both clocks
      if (ts.performanceTime > 0) this.firstSoundMs = ts.performanceTime + (Math.max(at, now) - ts.contextTime) * 1000;
    }
    src.onended = () => this._ended(src);
    this.chunks.push({ at, offset: this.samples / this.rateHz, dur: buf.duration });
    this.sources.push(src);
    this.samples += pcm.length;
    this.nextAt = at + buf.duration;
  }

  _ended(src) {
    if (src !== this.sources[this.sources.length - 1] || !this.finished) return;
    this.endedAt = this.ctx.currentTime;
    if (this.onended) this.onended();
  }

  /** No more chunks will come: `onended` fires when the last one has played. */
  finish(onended) {
    this.finished = true;
    this.onended = onended;
    if (!this.sources.length) onended();
  }

  stop() {
    for (const s of this.sources) { s.onended = null; try { s.stop(); } catch { /* not started */ } }
    this.sources = [];
  }

  get startedAt() { return this.chunks.length ? this.chunks[0].at : null; }
  get seconds() { return this.samples / this.rateHz; }

  /** Where in the stream's audio the listener is now (seconds), or -1 before it starts. */
  position() {
    const t = this.ctx ? this.ctx.currentTime : 0;
    let pos = -1;
    for (const c of this.chunks) {
      if (c.at > t) break;
      pos = c.offset + Math.min(t - c.at, c.dur);
    }
    return pos;
  }
}
