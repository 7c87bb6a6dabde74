// A tiny line plot of the last minutes on a canvas (no library: a few strokes).
export class Plot {
  constructor(canvas, { keep = 100, min = 0, max = null } = {}) {
    this.canvas = canvas;
    this.keep = keep;
    this.min = min;
    this.max = max;
    this.values = []; // null: no figure at that poll (a gap in the line)
  }

  add(value) {
    this.values.push(Number.isFinite(value) ? value : null);
    if (this.values.length > this.keep) this.values.shift();
    this.draw();
  }

  draw() {
    const c = this.canvas, g = c.getContext("2d");
    const w = c.width, h = c.height, pad = 4;
    g.clearRect(0, 0, w, h);
    const known = this.values.filter((v) => v !== null);
    if (!known.length) return;
    const top = this.max ?? Math.max(1, ...known) * 1.1;
    const x = (i) => pad + (i * (w - 2 * pad)) / Math.max(1, this.keep - 1);
    const y = (v) => h - pad - ((v - this.min) * (h - 2 * pad)) / (top - this.min || 1);
    g.strokeStyle = getComputedStyle(c).getPropertyValue("--accent") || "#2563eb";
    g.lineWidth = 1.5;
    g.beginPath();
    let pen = false;
    this.values.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      if (pen) g.lineTo(x(i), y(v)); else g.moveTo(x(i), y(v));
      pen = true;
    });
    g.stroke();
  }
}
