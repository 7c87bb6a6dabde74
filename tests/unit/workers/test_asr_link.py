"""A worker's `RemoteAsr` and the ASR process's `AsrServer` over a real Unix socket, with a
fake decoder at the decoder interface: batches and their errors come back in order, a
peer without the key is refused while the others are served, and a server that is gone
or silent fails only that batch, with a typed error."""

from __future__ import annotations

import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Listener
from pathlib import Path

import numpy as np
import pytest

from cosyvoiced.config.schema import AsrConfig
from cosyvoiced.listen.asr import AsrError, Utterance
from cosyvoiced.listen.events import Transcript
from cosyvoiced.listen.languages import LanguageError
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.setup import AsrLink
from cosyvoiced.workers.worker.asr_remote import RemoteAsr
from cosyvoiced.workers.worker.asr_serve import AsrServer, CpuCharge

KEY = b"k" * 32


class FakeDecoder:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.cfgs: list[AsrConfig] = []

    def transcribe(self, utts, cfg=None):
        self.cfgs.append(cfg)
        time.sleep(self.delay_s)
        if any(u.stream == "bad" for u in utts):
            raise AsrError("frames must be [T, 80]", code="asr_input")
        return [Transcript(text=f"{u.stream} said {u.end_ms}", start_ms=u.start_ms,
                           end_ms=u.end_ms, latency_ms=0.0, rtf=0.0, stream=u.stream)
                for u in utts]


def utt(stream: str, end_ms: int = 1000) -> Utterance:
    return Utterance(np.zeros((10, 80), np.float32), 0, end_ms, time.monotonic(), stream)


def serve(address: str, decoder: FakeDecoder) -> AsrServer:
    server = AsrServer(decoder, Listener(address, family="AF_UNIX", authkey=KEY))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def address(tmp_path: Path) -> str:
    return str(tmp_path / "asr.sock")


def test_batches_from_two_workers_come_back_in_order_with_the_live_keys(address):
    decoder = FakeDecoder(0.05)
    server = serve(address, decoder)
    link = AsrLink(address, KEY, ("en",))
    a = RemoteAsr(link, AsrConfig(beam_size=3))
    b = RemoteAsr(link, AsrConfig())
    out: dict[str, list] = {}
    threads = [threading.Thread(target=lambda r=r, s=s: out.__setitem__(
        s, r.transcribe([utt(s + "1", 1000), utt(s + "2", 2000)]))) for r, s in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [t.text for t in out["a"]] == ["a1 said 1000", "a2 said 2000"]
    assert [t.text for t in out["b"]] == ["b1 said 1000", "b2 said 2000"]
    assert sorted(c.beam_size for c in decoder.cfgs) == [1, 3]
    assert a.last_cpu_s >= 0.0 and server.batches == 2
    # a batch the decoder refuses: its typed error for each utterance, the link stays up
    assert [r.code for r in a.transcribe([utt("bad"), utt("x")])] == ["asr_input"] * 2
    assert a.transcribe([utt("c")])[0].text == "c said 1000"
    with pytest.raises(LanguageError):
        a.check_language("klingon")
    server.close()


def test_a_peer_without_the_key_is_refused_and_the_others_served(address):
    server = serve(address, FakeDecoder())
    good = RemoteAsr(AsrLink(address, KEY, ("en",)), AsrConfig())
    assert good.transcribe([utt("s")])[0].text == "s said 1000"
    with pytest.raises(AuthenticationError):
        Client(address, family="AF_UNIX", authkey=b"wrong" * 8)
    assert good.transcribe([utt("t")])[0].text == "t said 1000"
    assert RemoteAsr(AsrLink(address, KEY, ()), AsrConfig()).transcribe([utt("u")])[0].text
    server.close()


def test_no_server_fails_the_batch_with_a_typed_error_after_the_wait(address):
    remote = RemoteAsr(AsrLink(address, KEY, ("en",)), AsrConfig(), reconnect_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(AsrError) as err:
        remote.transcribe([utt("s")])
    assert err.value.code == "asr_unavailable" and 0.3 <= time.monotonic() - t0 < 3.0


def test_a_batch_sent_while_the_server_is_away_goes_to_its_successor(address):
    remote = RemoteAsr(AsrLink(address, KEY, ("en",)), AsrConfig(), reconnect_s=10.0)
    first = serve(address, FakeDecoder())
    assert remote.transcribe([utt("s")])[0].text == "s said 1000"
    first.close()  # the connection it holds now leads nowhere
    holder: list = []
    t = threading.Thread(target=lambda: holder.append(remote.transcribe([utt("late")])))
    t.start()
    time.sleep(0.5)
    Path(address).unlink(missing_ok=True)
    second = serve(address, FakeDecoder())
    t.join(10)
    assert holder and holder[0][0].text == "late said 1000"
    second.close()


def test_a_silent_server_times_out_the_batch(address):
    server = serve(address, FakeDecoder(delay_s=2.0))
    remote = RemoteAsr(AsrLink(address, KEY, ("en",)), AsrConfig(), timeout_s=0.3)
    with pytest.raises(AsrError) as err:
        remote.transcribe([utt("s")])
    assert err.value.code == "asr_timeout"
    server.close()


def test_cpu_is_charged_to_batches_and_never_to_probes():
    now = [0.0]
    server = AsrServer(FakeDecoder(), Listener(family="AF_UNIX", authkey=KEY))
    server.charge = CpuCharge(clock=lambda: now[0])
    now[0] = 0.5
    probe = server.decode(m.DecodeBatch((), AsrConfig()))  # the pool's, mid-batch
    assert probe.results == () and probe.cpu_s == 0.0
    now[0] = 0.7
    assert server.decode(m.DecodeBatch((utt("a"),), AsrConfig())).cpu_s == pytest.approx(0.7)
    now[0] = 0.9
    assert server.decode(m.DecodeBatch((utt("b"),), AsrConfig())).cpu_s == pytest.approx(0.2)
    assert server.batches == 2
    server.close()
