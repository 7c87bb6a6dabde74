// What the Speak panel offers to download: WAV from the audio it played, WebVTT from
// its words.

/** A WAV file (16-bit mono) holding `chunks` (Int16Arrays) at `rateHz`. */
export function wavBlob(chunks, rateHz) {
  const n = chunks.reduce((a, c) => a + c.length, 0);
  const head = new DataView(new ArrayBuffer(44));
  const ascii = (at, s) => [...s].forEach((ch, i) => head.setUint8(at + i, ch.charCodeAt(0)));
  ascii(0, "RIFF"); head.setUint32(4, 36 + n * 2, true); ascii(8, "WAVE");
  ascii(12, "fmt "); head.setUint32(16, 16, true); head.setUint16(20, 1, true);
  head.setUint16(22, 1, true); head.setUint32(24, rateHz, true);
  head.setUint32(28, rateHz * 2, true); head.setUint16(32, 2, true); head.setUint16(34, 16, true);
  ascii(36, "data"); head.setUint32(40, n * 2, true);
  return new Blob([head, ...chunks], { type: "audio/wav" });
}

const CUE_CHARS = 42;
const CUE_PAUSE_S = 0.6;

/** WebVTT cues from words, as `cosyvoiced say --subtitles` makes them: up to 42
 * characters, ended after a sentence's last word or before a pause over 0.6 s. */
export function vtt(words) {
  const cues = [];
  let cue = [];
  const flush = () => { if (cue.length) cues.push(cue); cue = []; };
  for (const word of words) {
    const w = { ...word, text: word.text.split(/\s+/).filter(Boolean).join(" ") };
    const prev = cue[cue.length - 1];
    const text = cue.map((x) => x.text).concat(w.text).join(" ");
    if (prev && (text.length > CUE_CHARS || w.start - prev.end > CUE_PAUSE_S)) flush();
    cue.push(w);
    if (/[.!?]$/.test(w.text)) flush();
  }
  flush();
  const stamp = (s) => {
    const ms = Math.max(0, Math.round(s * 1000));
    const p = (v, n) => String(v).padStart(n, "0");
    return `${p(Math.floor(ms / 3600000), 2)}:${p(Math.floor(ms / 60000) % 60, 2)}:` +
      `${p(Math.floor(ms / 1000) % 60, 2)}.${p(ms % 1000, 3)}`;
  };
  const body = cues.map((c) => `${stamp(c[0].start)} --> ${stamp(c[c.length - 1].end)}\n` +
    c.map((w) => w.text).join(" ") + "\n");
  return new Blob(["WEBVTT\n\n" + body.join("\n")], { type: "text/vtt" });
}

/** Offer `blob` as a file named `name`. */
export function save(blob, name) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}
