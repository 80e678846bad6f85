"""A vLLM KV event stream on the page: every event a step, each step what pagedsim holds.

The recorded stream (data/vllm_stream.kvcap) came from vLLM 0.34's own KVCacheManager
through vLLM's own ZmqEventPublisher, captured by `pagedsim.kv_subscriber` on a loopback
port (`python -m tests.vllm_oracle.kv_event_workload`). pagedsim's PrefixCachingManager
runs the same workload here without vLLM, and the page's state, read back from the page
(`stream_state.py`), is compared with it after every event.
"""

import json
import random
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import kv_events as ke
from pagedsim import kv_stream as ks
from pagedsim.app import play
from pagedsim.view import command
from tests.view.stream_state import Model, cached, check_follows, held, on_tiles, page_json, tiles
from tests.vllm_oracle.kv_event_workload import RECORDED, HashLink, Sides

msgspec = pytest.importorskip("msgspec", reason="the events extra: pip install -e .[events]")

RECORDING = Path(__file__).parent / "data" / "vllm_stream.kvcap"


def page_of(path: Path, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "page.html"
    assert command.main([str(path), "--html", str(out), *extra]) == 0
    return page_json(out.read_text(encoding="utf-8"))


def test_the_recorded_vllm_stream_is_at_every_step_what_pagedsim_holds(tmp_path):
    data = page_of(RECORDING, tmp_path)
    sides, ops = Sides(None, seed=RECORDED["seed"]), []
    for batch in ks.batches_of_capture(RECORDING.read_bytes()):
        ours: list = []
        while not ours:  # the operations that published nothing published no batch
            ours = sides.step()[1]
        ops.append((batch.events, ours, held(sides.ours)))
    assert check_follows(data, ops, HashLink()) == data["stream"]["events"] == 87


def _instructors_stream(path: Path, events: int = 200) -> list:
    """A 48-block LRU prefix cache's stream, about as the issue's instructor wrote it."""
    sides = Sides(None, num_gpu_blocks=48, seed=5)
    out: list = []
    while len(out) < events:
        out += sides.step()[1]
    out = out[:events]
    lines = [
        json.dumps(ke.batch_to_json(ke.Batch([e], seq=k, ts=float(k)))) for k, e in enumerate(out)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def test_play_events_puts_every_event_of_a_200_event_stream_on_the_page(tmp_path, capsys):
    """Before: the page kept 8 of the 200 events (0-3 and 197-200)."""
    stream = tmp_path / "e.jsonl"
    events = _instructors_stream(stream)
    page = tmp_path / "e.html"
    assert play.main(["--events", str(stream), "--html", str(page)]) == 0
    data = page_json(page.read_text(encoding="utf-8"))
    assert [s["n"] for s in data["steps"]] == list(range(201))
    model = Model()
    for n, e in enumerate(events, 1):
        model.apply(e)
        assert {r for r in cached(data, n)} == {str(h) for h in model.blocks}
        named = data["steps"][n]["kv"].get("hashes", [])
        shown = set(on_tiles(data, n).values()) | {r["s"] for r in data["stream"]["recs"]}
        assert all(h in data["steps"][n]["c"] and h in shown for h in named[:8])
    assert "ref count" not in json.dumps(data["stream"])
    assert capsys.readouterr().out.count("\nevent ") == 199


def test_view_reads_a_stream_of_json_lines(tmp_path):
    """Before: `pagedsim view E.jsonl` said "not JSON (Extra data at line 2)"."""
    stream = tmp_path / "e.jsonl"
    _instructors_stream(stream, 20)
    data = page_of(stream, tmp_path)
    assert len(data["steps"]) == 21 and data["steps"][5]["kv"]["seq"] == 4


def _capture(batches: list[ke.Batch], dropped=(), replay_end_after=None) -> bytes:
    """vLLM's messages for `batches` (msgspec's array form), as a capture."""
    import io

    f = io.BytesIO()
    f.write(ks.MAGIC)
    for k, b in enumerate(batches):
        if k in dropped:
            continue
        payload = msgspec.msgpack.encode(
            [b.ts, [ke.event_to_json(e) for e in b.events], b.data_parallel_rank]
        )
        ks.write_message(f, [b"kv", k.to_bytes(8, "big"), payload])
        if replay_end_after == k:
            ks.write_message(f, [b"", (-1).to_bytes(8, "big", signed=True), b""], True)
    return f.getvalue()


HASHES = st.one_of(st.integers(0, (1 << 64) - 1), st.binary(min_size=1, max_size=32))


@st.composite
def vllm_streams(draw):
    """Batches of events a prefix cache could send: stores of new blocks (after a cached
    one or a prompt's start), removals of cached (and a few unknown) hashes, clears."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    bs, live, out, fresh = draw(st.integers(1, 4)), [], [], iter(range(1, 1 << 30))
    for _ in range(draw(st.integers(1, 12))):
        batch = []
        for _ in range(rng.randint(1, 3)):
            roll = rng.random()
            if roll < 0.55 or not live:
                n = rng.randint(1, 3)
                hashes = [next(fresh) * 7919 + (1 << 63) for _ in range(n)]
                parent = rng.choice(live) if live and rng.random() < 0.6 else None
                toks = [rng.randrange(50_000) for _ in range(n * bs)]
                batch.append(
                    ke.BlockStored(hashes, parent, toks, bs, lora_id=rng.choice([None, 3]))
                )
                live += hashes
            elif roll < 0.9:
                gone = rng.sample(live, rng.randint(1, len(live))) + [rng.choice([5, live[0]])]
                batch.append(ke.BlockRemoved(gone))
                live = [h for h in live if h not in gone]
            else:
                batch.append(ke.AllBlocksCleared())
                live = []
        out.append(ke.Batch(batch, ts=float(len(out)), data_parallel_rank=0))
    return out


@settings(max_examples=40, deadline=None)
@given(vllm_streams(), st.integers(1, 4), st.data())
def test_any_stream_from_a_capture_is_every_step_the_cache_it_describes(batches, every, data):
    dropped = (
        data.draw(st.sets(st.integers(1, len(batches) - 1), max_size=2))
        if len(batches) > 1
        else set()
    )
    blob = _capture(batches, dropped)
    got = ks.batches_of_capture(blob)
    assert [b.seq for b in got] == [k for k in range(len(batches)) if k not in dropped]
    from pagedsim.view import stream

    page = stream.page_data(got, every=every)
    events = [e for b in got for e in b.events]
    model, states = Model(), tiles(page)
    kept = [s["n"] for s in page["steps"]]
    assert kept == [0] + [
        k for k in range(1, len(events) + 1) if k % every == 0 or k == len(events)
    ]
    for n, e in enumerate(events, 1):
        model.apply(e)
        assert set(cached(page, n)) == {str(h) for h in model.blocks}
        if n in kept:
            assert states[kept.index(n)] == on_tiles(page, n)
    notes = [note for s in page["steps"] for note in s.get("kv", {}).get("notes", ())]
    after = [k for k in range(len(batches)) if k not in dropped]  # a gap shows on what follows
    gaps = [k for k in dropped if k - 1 not in dropped and any(j > k for j in after)]
    assert sum("seq gap" in note for note in notes) == len(gaps) or every > 1
    if every > 1:
        assert f"every {every}th" in page["version"]


def test_a_gap_and_a_replay_end_are_noted_on_the_step_where_they_happened():
    batches = [ke.Batch([ke.BlockStored([k], None, [k], 1)], ts=0.0) for k in range(1, 7)]
    got = ks.batches_of_capture(_capture(batches, dropped={2, 3}, replay_end_after=4))
    from pagedsim.view import stream

    steps = stream.page_data(got)["steps"]
    assert [s["kv"]["notes"] for s in steps[1:]] == [
        [],
        [],
        ["seq gap: 2 batches (2-3) never arrived"],  # seq 4
        ["replay ended (seq -1)"],  # seq 5, after the end marker
    ]


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (ks.MAGIC + struct.pack(">I", 3), "message 1 (byte 22): the capture ends inside a length"),
        (ks.MAGIC + struct.pack(">II", 9, 0), "message 1 (byte 22): 9 frames"),
        (
            ks.MAGIC + struct.pack(">III", 1, 1 << 30, 0),
            "message 1 (byte 22): a frame of 1073741824 bytes runs past the capture",
        ),
    ],
)
def test_a_broken_capture_is_one_value_error(blob, why):
    with pytest.raises(ValueError, match="^" + re.escape(why)):
        ks.batches_of_capture(blob)


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\xc1", "not msgpack"),
        (b"\x91" * 40 + b"\xc0", "nested deeper than"),
        (b"\x93\x00\x91\x81\xa4type\xa4Nope\xc0", "not a KV cache event"),
        (b"\x93\xc3\x90\xc0", "a batch's ts must be a finite number"),
    ],
)
def test_a_hostile_payload_is_refused_in_one_line(payload, why):
    blob = ks.MAGIC
    import io

    f = io.BytesIO()
    ks.write_message(f, [b"", (0).to_bytes(8, "big"), payload])
    with pytest.raises(ValueError, match=why):
        ks.batches_of_capture(blob + f.getvalue())


def test_without_the_extra_the_error_names_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "msgspec", None)  # import msgspec now fails
    with pytest.raises(
        ValueError, match=r"^msgspec is needed .* pip install 'pagedsim\[events\]'$"
    ):
        ks.decode_payload(b"\x90")
