"""vLLM's own publisher, live, to pagedsim's page: every event arrives and matches.

vLLM's KVCacheManager runs a random workload (`kv_event_workload.Sides`, beside
pagedsim's PrefixCachingManager); after each operation its events go out through vLLM's
own `ZmqEventPublisher` on a loopback port, as the engine core publishes them. The first
batches are published before pagedsim subscribes, so they come back only through vLLM's
replay socket. `pagedsim view --zmq ... --bind --replay ...` runs as its own process,
rewriting a live page; once the page holds every event it is stopped with SIGINT and
writes the final page. That page must, after every event, hold what pagedsim's manager
holds (`tests/view/stream_state.check_follows`), and Chromium must draw the same.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.vllm_oracle.sides import needs_vllm  # noqa: E402

needs_vllm()

from tests.view.stream_state import check_follows, held, page_json, tiles  # noqa: E402
from tests.vllm_oracle.kv_event_workload import HashLink, Sides, load_vllm  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EARLY = 4  # operations with events published before pagedsim subscribes


@pytest.fixture(scope="module")
def vllm_core():
    return load_vllm()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ctrl_c_default() -> None:
    """In the child before exec: SIGINT back to its default. A test run started in the
    background (`cmd &` in a script) passes SIGINT on as ignored, and then Python never raises
    KeyboardInterrupt, so the Ctrl-C this test sends would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _subscribe(tmp_path: Path, port: int, replay: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pagedsim", "view", "--zmq", f"tcp://127.0.0.1:{port}"]
    cmd += ["--bind", "--replay", f"tcp://127.0.0.1:{replay}", "--html", str(tmp_path / "p.html")]
    cmd += ["--save", str(tmp_path / "s.kvcap"), "--refresh", "0.3", "--duration", "120"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_default
    )
    assert proc.stderr is not None
    assert "listening" in proc.stderr.readline()
    return proc


def _wait_for(path: Path, events: int, proc: subprocess.Popen) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the subscriber stopped early"
        try:
            data = page_json(path.read_text(encoding="utf-8"))
        except (OSError, AssertionError, ValueError):
            data = None
        if data is not None and data["stream"]["events"] >= events:
            return data
        time.sleep(0.2)
    raise AssertionError(f"the live page never reached {events} events")


@pytest.mark.parametrize("seed", [11, 12])
def test_a_live_vllm_stream_is_at_every_step_what_pagedsim_holds(vllm_core, tmp_path, seed):
    v = vllm_core
    port, replay = _port(), _port()
    pub = v["kv_events"].ZmqEventPublisher(
        0, endpoint=f"tcp://127.0.0.1:{port}", replay_endpoint=f"tcp://127.0.0.1:{replay}"
    )
    sides, ops, proc = Sides(v, seed=seed), [], None
    try:
        for _ in range(120):
            if len(ops) == EARLY and proc is None:
                proc = _subscribe(tmp_path, port, replay)
                time.sleep(1.0)  # it connects; what went before comes back by replay
            theirs, ours = sides.step()
            if theirs:
                pub.publish(v["kv_events"].KVEventBatch(ts=time.time(), events=theirs))
                ops.append((theirs, ours, held(sides.ours)))
        assert proc is not None
        total = sum(len(o[0]) for o in ops)
        live = _wait_for(tmp_path / "p.html", total, proc)
        assert live["stream"]["live"] > 0  # the page being rewritten reloads itself
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        pub.shutdown()
        if proc is not None and proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    data = page_json((tmp_path / "p.html").read_text(encoding="utf-8"))
    assert data["stream"]["live"] == 0 and f"{total:,} events" in err
    assert check_follows(data, ops, HashLink()) == total
    notes = [n for s in data["steps"][1:] for n in s["kv"]["notes"]]
    assert any("came from the replay socket" in n for n in notes), notes
    assert not any("never arrived" in n for n in notes), notes
    _check_in_chromium(tmp_path / "p.html", data)


def _check_in_chromium(page: Path, data: dict) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not in this venv (pip install playwright)")
    from tests.view.conftest import CHROMIUM_ARGS, chromium_path

    chromium = chromium_path()
    if chromium is None:
        pytest.skip("no system Chromium (apt-get install -y chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        tab = browser.new_page()
        errors: list = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(page.as_uri())
        shown = tab.evaluate(
            """() => [...Array(window.pagedsimViewer.count()).keys()].map(i => {
                window.pagedsimViewer.go(i);
                return [...document.querySelectorAll('#blocks .block.cached')].map(
                    e => [+e.dataset.block, e.querySelector('.badge').textContent]);
            })"""
        )
        browser.close()
    assert errors == []
    assert [dict(s) for s in shown] == tiles(data)
