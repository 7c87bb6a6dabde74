#!/usr/bin/env python3
"""Time from process start to READY=1 on a config: `python -m tools.startup [-n 5] [--config F]`.

Runs the real daemon N times with a private notify socket and temp dirs, prints each
time and the median.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_start(config: Path, timeout_s: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        sock_path = os.path.join(tmp, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(sock_path)
        sock.settimeout(timeout_s)
        sets = [f"service.control_socket={json.dumps(tmp + '/control.sock')}",
                f"service.state_dir={json.dumps(tmp + '/lib')}",
                f"service.cache_dir={json.dumps(str(REPO / 'var' / 'cache'))}",
                'api.listen=["tcp://127.0.0.1:0"]']
        args = [str(Path(sys.executable).parent / "cosyvoiced"), "run", "--config", str(config)]
        for s in sets:
            args += ["--set", s]
        t0 = time.monotonic()
        proc = subprocess.Popen(args, env={**os.environ, "NOTIFY_SOCKET": sock_path},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while b"READY=1" not in sock.recv(4096):
                pass
            took = time.monotonic() - t0
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            sock.close()
        return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5)
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "dev.toml")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    times = [one_start(args.config, args.timeout) for _ in range(args.n)]
    for i, t in enumerate(times, 1):
        print(f"run {i}: {t:.3f} s to READY=1")
    print(f"median of {len(times)}: {statistics.median(times):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
