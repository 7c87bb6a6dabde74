"""The memory suite is registered and reads smaps_rollup as the kernel writes it."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from tools.bench import memory
from tools.bench.cli import SUITES


def test_memory_is_a_suite():
    assert "memory" in SUITES


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux smaps")
def test_rollup_reads_this_process_and_nothing_for_a_gone_one():
    mine = memory.rollup_kb("self")
    assert mine["Pss"] > 0 and mine["Pss"] >= mine["Pss_Anon"] > 0
    assert abs(mine["Pss"] - mine["Pss_Anon"] - mine["Pss_File"] - mine.get("Pss_Shmem", 0)) <= 8
    assert memory.rollup_kb(2**22 + 7) == {}


def test_every_worker_is_given_the_short_and_the_long_text_at_once():
    """Two workers: two short requests in flight together, then two long ones (new
    streams go to the least loaded worker, so each worker runs one of each)."""
    seen: list[str] = []
    inflight, peak = [0], {}
    lock, both = threading.Lock(), threading.Barrier(2, timeout=10)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            text = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["text"]
            with lock:
                seen.append(text)
                inflight[0] += 1
                peak[text] = max(peak.get(text, 0), inflight[0])
            both.wait()  # returns only once the other request of the pair is in flight
            with lock:
                inflight[0] -= 1
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        memory._serve_every_worker(f"http://127.0.0.1:{server.server_port}", 2)
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [memory.TEXT] * 2 + [memory.LONG] * 2
    assert peak == {memory.TEXT: 2, memory.LONG: 2}
