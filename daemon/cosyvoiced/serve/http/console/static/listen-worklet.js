// The Listen panel's capture: microphone samples averaged down to the rate the daemon's
// WebSocket takes (box filter; the context already runs at that rate where the browser
// resamples), posted as s16le blocks of 100 ms with their level in dBFS.
class Capture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const rateHz = options.processorOptions.rateHz;
    this.ratio = sampleRate / rateHz;
    this.size = rateHz / 10;
    this.block = new Int16Array(this.size);
    this.fill = 0;
    this.pos = 0;
    this.acc = 0;
    this.n = 0;
    this.energy = 0;
  }

  process(inputs) {
    const samples = inputs[0] && inputs[0][0];
    if (!samples) return true;
    for (const x of samples) {
      this.acc += x;
      this.n += 1;
      this.pos += 1;
      if (this.pos < this.ratio) continue;
      this.pos -= this.ratio;
      const y = Math.max(-1, Math.min(1, this.acc / this.n));
      this.acc = 0;
      this.n = 0;
      this.energy += y * y;
      this.block[this.fill++] = Math.round(y * 32767);
      if (this.fill === this.size) {
        const db = 10 * Math.log10(this.energy / this.fill + 1e-10);
        this.port.postMessage({ pcm: this.block.buffer, db }, [this.block.buffer]);
        this.block = new Int16Array(this.size); // the last one was handed over
        this.fill = 0;
        this.energy = 0;
      }
    }
    return true;
  }
}

registerProcessor("capture", Capture);
