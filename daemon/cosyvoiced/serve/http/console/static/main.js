// The console's entry: sign in when the API asks for a token, then the panels.
import { ApiError, getJson, onReachable, onUnauthorized, setToken, token } from "./api.js";
import { CallsPanel } from "./calls.js";
import { ListenPanel } from "./listen.js";
import { SpeakPanel } from "./speak.js";
import { StatusPanel } from "./status.js";

const $ = (id) => document.getElementById(id);
let speak = null, status = null, calls = null, listen = null;

function showLogin(refused) {
  $("panels").hidden = true;
  $("login").hidden = false;
  $("signout").hidden = true;
  if (status) clearTimeout(status.timer);
  if (calls) calls.stop();
  if (listen) listen.release();
  const notice = $("notice");
  notice.hidden = !refused;
  notice.textContent = refused && token() ? "That token was refused." : "Sign in to use the API.";
  $("token").focus();
}

async function start() {
  try {
    await getJson("/v1/status"); // refused without the token it needs
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return; // the login is shown
    $("notice").hidden = false;
    $("notice").textContent = `The daemon did not answer: ${err.message}`;
    setTimeout(start, 3000);
    return;
  }
  $("notice").hidden = true;
  $("login").hidden = true;
  $("panels").hidden = false;
  $("signout").hidden = !token();
  speak ||= new SpeakPanel();
  status ||= new StatusPanel();
  calls ||= new CallsPanel();
  listen ||= new ListenPanel();
  calls.textAllowed();
  speak.loadVoices().catch((err) => speak.message(`No voice list: ${err.message}`, true));
  status.poll();
  calls.start();
  document.body.dataset.ready = "1";
}

/** The daemon stopped answering (stopped, restarting): say so until it answers again, then
 * pick up where the panels were (the polls keep asking; the calls' socket reconnects). */
function reachable(up) {
  const body = document.body, notice = $("notice");
  if (!body.dataset.ready || up === (body.dataset.daemon !== "lost")) return;
  body.dataset.daemon = up ? "up" : "lost";
  clearTimeout(reachable.timer);
  notice.hidden = false;
  if (!up) {
    notice.textContent = "The daemon is not answering (stopped or restarting); reconnecting…";
    return;
  }
  notice.textContent = "The daemon is back.";
  reachable.timer = setTimeout(() => { notice.hidden = true; }, 5000);
  calls.reconnect();
  speak.loadVoices().catch((err) => speak.message(`No voice list: ${err.message}`, true));
}

onUnauthorized(() => showLogin(true));
onReachable(reachable);
$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  setToken($("token").value.trim());
  $("token").value = "";
  start();
});
$("signout").addEventListener("click", () => { setToken(""); showLogin(false); });
start();
