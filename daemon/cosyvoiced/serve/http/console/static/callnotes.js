// What the Calls panel tells of each call's events: barge-ins with what the caller heard,
// how each say ended, and (only when the operator asks and the page is signed in with the
// API's token: it is personal data) the caller's transcripts and the words said.
const KEEP = 40;

/** A note for one call event, or null: {call, kind, text}. `showText`: words may show. */
export function noteFor(ev, showText) {
  const call = (ev.stream || "").slice(0, 8);
  if (ev.type === "barge_in") {
    return { call, kind: "barge", text: `caller barged in at ${(ev.start_ms / 1000).toFixed(1)} s` };
  }
  if (ev.type === "playback_done") {
    const words = ev.words || [];
    if (!showText || !words.length) {
      return { call, kind: "heard", text: `say ended (${ev.reason}): the caller heard ` +
        `${(ev.heard_s || 0).toFixed(1)} s, ${words.length} word${words.length === 1 ? "" : "s"}` };
    }
    const heard = words.map((w) => w.text + (w.partial ? "…" : "")).join(" ");
    return { call, kind: "heard", text: `say ended (${ev.reason}): heard “${heard}”` +
      (ev.unspoken ? `, not heard “${ev.unspoken.trim()}”` : "") };
  }
  if (ev.type === "transcript" && showText && ev.text.trim()) {
    return { call, kind: "transcript", text: `caller: “${ev.text.trim()}”` };
  }
  return null;
}

export class CallNotes {
  constructor(list) {
    this.list = list;
  }

  add(note) {
    const li = document.createElement("li");
    li.dataset.kind = note.kind;
    const who = document.createElement("b");
    who.textContent = note.call;
    li.append(who, " ", note.text);
    this.list.prepend(li);
    while (this.list.children.length > KEEP) this.list.lastChild.remove();
  }
}
