"""`pagedsim view --zmq`: a live subscriber, fed here by a plain ZMQ publisher that sends
vLLM's three frames (the oracle tier feeds it from vLLM's own ZmqEventPublisher)."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pagedsim import kv_events as ke
from pagedsim import kv_stream as ks
from tests.view.stream_state import page_json

zmq = pytest.importorskip("zmq", reason="the events extra: pip install -e .[events]")
msgspec = pytest.importorskip("msgspec", reason="the events extra: pip install -e .[events]")
ROOT = Path(__file__).resolve().parents[2]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _payload(k: int) -> bytes:
    stored = ke.BlockStored([(1 << 63) + k], None, [k, k], 2, lora_name="<!--" if k == 3 else None)
    return msgspec.msgpack.encode([float(k), [ke.event_to_json(stored)], 0])


def test_a_live_stream_is_written_whole_with_its_gap_and_its_capture(tmp_path):
    port = _port()
    page, saved = tmp_path / "live.html", tmp_path / "s.kvcap"
    cmd = [sys.executable, "-m", "pagedsim", "view", "--zmq", f"tcp://127.0.0.1:{port}"]
    cmd += ["--topic", "kv", "--max-events", "7", "--duration", "60", "--html", str(page)]
    cmd += ["--save", str(saved), "--refresh", "0.2"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stderr=subprocess.PIPE, text=True
    )
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    try:
        assert proc.stderr is not None and "listening" in proc.stderr.readline()
        pub.bind(f"tcp://127.0.0.1:{port}")
        time.sleep(1.0)  # the subscription arrives
        pub.send_multipart([b"other", (0).to_bytes(8, "big"), b"\xc1"])  # another topic: unseen
        for k in [0, 1, 2, 3, 6, 7, 8]:  # seq 4 and 5 never sent
            pub.send_multipart([b"kv", k.to_bytes(8, "big"), _payload(k)])
            time.sleep(0.05)
        _, err = proc.communicate(timeout=60)
    finally:
        pub.close(linger=0)
        ctx.term()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "7 events in 7 batches" in err
    data = page_json(page.read_text(encoding="utf-8"))
    assert [s["n"] for s in data["steps"]] == list(range(8))
    assert data["steps"][5]["kv"]["notes"] == ["seq gap: 2 batches (4-5) never arrived"]
    assert data["steps"][4]["kv"]["lora_name"] == "<!--" and data["stream"]["live"] == 0
    batches = ks.batches_of_capture(saved.read_bytes())
    assert [b.seq for b in batches] == [0, 1, 2, 3, 6, 7, 8] and batches[0].topic == "kv"


def test_zmq_needs_a_page_or_a_file_to_write():
    run = [sys.executable, "-m", "pagedsim", "view", "--zmq", "tcp://127.0.0.1:1"]
    out = subprocess.run(run, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2 and "--zmq needs --html PAGE or --save FILE" in out.stderr
