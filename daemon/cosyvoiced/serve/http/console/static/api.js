// Calls to the daemon's own API (same origin only), with the token kept in this tab.
const KEY = "cosyvoiced.token";
const listeners = new Set();
const reachable = new Set();

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function token() { return sessionStorage.getItem(KEY) || ""; }
export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value); else sessionStorage.removeItem(KEY);
}
/** `fn(true)` when a call was refused for want of a (right) token. */
export function onUnauthorized(fn) { listeners.add(fn); }
/** `fn(false)` when a call found no daemon (stopped, restarting), `fn(true)` on each answer. */
export function onReachable(fn) { reachable.add(fn); }

function headers(extra) {
  const h = new Headers(extra || {});
  if (token()) h.set("Authorization", `Bearer ${token()}`);
  return h;
}

/** The daemon's {"error": {"code", "message"}} as an ApiError. */
async function failure(resp) {
  let code = "http_" + resp.status, message = `${resp.status} ${resp.statusText}`;
  try {
    const body = await resp.json();
    if (body && body.error) ({ code, message } = body.error);
  } catch { /* not JSON: keep the status line */ }
  if (resp.status === 401) listeners.forEach((fn) => fn(true));
  return new ApiError(resp.status, code, message);
}

/** A request to the daemon; resolves with the Response when it is 2xx. */
export async function call(path, { method = "GET", json, body, signal } = {}) {
  const init = { method, signal, body, headers: headers(), credentials: "same-origin", cache: "no-store" };
  if (json !== undefined) {
    init.headers.set("Content-Type", "application/json");
    init.body = JSON.stringify(json);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    reachable.forEach((fn) => fn(false));
    throw new ApiError(0, "unreachable", "the daemon did not answer (is it running?)");
  }
  reachable.forEach((fn) => fn(true));
  if (!resp.ok) throw await failure(resp);
  return resp;
}

export async function getJson(path) { return (await call(path)).json(); }

/** Server-sent events of a streamed response, each `data:` line's JSON, in order;
 * `onbytes()` as each read comes. */
export async function* events(resp, onbytes = null) {
  const reader = resp.body.getReader();
  const text = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (onbytes) onbytes();
    buf += text.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trimStart()).join("\n");
      if (data) yield JSON.parse(data);
    }
  }
}

function base64url(text) {
  let bin = "";
  for (const b of new TextEncoder().encode(text)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** A WebSocket to the daemon (this origin). A browser cannot set Authorization on one:
 * the token goes as a subprotocol (never in the URL, which lands in logs). */
export function openSocket(path) {
  const url = new URL(path, location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const protocols = ["cosyvoiced"];
  if (token()) protocols.push(`cosyvoiced.token.${base64url(token())}`);
  return new WebSocket(url, protocols);
}
