"""vLLM 0.34's own code as the producer of KV event streams: every event arrives, is applied,
and leaves on the page what vLLM's block pool holds; every field vLLM defines is read.

- `stream_workload.run`: vLLM's KVCacheManager on a random workload publishes through its
  own ZmqEventPublisher (with its replay socket); pagedsim's Subscriber reads the stream;
  after every batch the replay's cached set equals vLLM's `cached_block_hash_to_block`
  (one full group; a hybrid full + sliding-window pair with two block sizes; bytes hashes).
- vLLM's structs, built by Hypothesis with every field vLLM 0.34 defines, encoded by vLLM's
  encoder: pagedsim reads each field back as vLLM wrote it.
- A vLLM publisher restarted on the same endpoint (seq from 0 again): both runs arrive.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.vllm_oracle.sides import needs_vllm

needs_vllm()

from pagedsim import kv_events as ke  # noqa: E402
from pagedsim import kv_stream as ks  # noqa: E402
from pagedsim.kv_subscriber import Subscriber  # noqa: E402
from tests.vllm_oracle import stream_workload  # noqa: E402


@pytest.mark.parametrize(
    ("hybrid", "events", "seed"),
    [(False, 4_000, 1), (True, 4_000, 2), (True, 20_000, 3)],
    ids=["full", "hybrid", "hybrid-20k"],
)
def test_every_event_vllm_publishes_is_applied_and_leaves_vllms_cache(vllm, hybrid, events, seed):
    out = stream_workload.run(vllm, events, hybrid=hybrid, seed=seed)
    assert out.published >= events
    assert out.received == out.applied == out.published, out
    assert out.refused == 0 and out.notes == [], out
    assert out.mismatches == [], f"{len(out.mismatches)} batches differ, first {out.mismatches[:3]}"


def test_a_hybrid_capture_of_vllms_stream_is_a_page_with_every_event(vllm, tmp_path):
    """The capture the subscriber saved, through `pagedsim view`: one step per event, and at
    the end one tile per block vLLM's pool holds (a copy is a block of its own)."""
    from pagedsim.view.command import main as view
    from tests.view.stream_state import page_json, tiles

    cap, page = tmp_path / "s.kvcap", tmp_path / "p.html"
    out = stream_workload.run(vllm, 1_500, hybrid=True, seed=5, capture=str(cap))
    assert view([str(cap), "--html", str(page)]) == 0
    data = page_json(page.read_text(encoding="utf-8"))
    assert data["stream"]["events"] == out.published == len(data["steps"]) - 1
    assert len(tiles(data)[-1]) == out.blocks_at_end > 0


def test_bytes_hashes_arrive_as_hex_and_match_vllms_cache(vllm, monkeypatch):
    """VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: vLLM publishes its sha256 hashes as bytes."""
    monkeypatch.setenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "0")
    out = stream_workload.run(vllm, 1_500, hybrid=True, seed=4)
    assert out.received == out.applied == out.published and out.mismatches == [], out


def _vllm_fields(struct: Any) -> dict[str, Any]:
    """A vLLM struct's fields as pagedsim reads them: bytes as hex, tuples as lists."""

    def plain(v: Any) -> Any:
        if isinstance(v, bytes):
            return v.hex()
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    names = struct.__struct_fields__
    return {name: plain(getattr(struct, name)) for name in names}


TEXT = st.text(max_size=8)
HASH = st.one_of(st.integers(0, (1 << 64) - 1), st.binary(min_size=1, max_size=32))
KEY = st.one_of(TEXT, st.integers(0, 1 << 40), st.binary(min_size=32, max_size=32))
MM_PAIR = st.tuples(TEXT, st.integers(0, 4096))


@st.composite
def vllm_events(draw, ev: Any) -> Any:
    """One of vLLM's own event structs, every field of vLLM 0.34 drawn."""
    kind = draw(st.sampled_from(["stored", "removed", "cleared"]))
    medium = draw(st.sampled_from([None, "GPU", "CPU", "STORAGE"]))
    group = draw(st.one_of(st.none(), st.integers(0, 3)))
    locality = draw(st.sampled_from([None, "LOCAL", "REMOTE"]))
    ownership = draw(st.one_of(st.none(), TEXT))
    if kind == "cleared":
        return ev.AllBlocksCleared()
    hashes = draw(st.lists(HASH, min_size=1, max_size=4))
    if kind == "removed":
        return ev.BlockRemoved(hashes, medium, group, locality=locality, ownership=ownership)
    n, bs = len(hashes), draw(st.integers(1, 4))
    spec = draw(st.sampled_from([None, "full_attention", "sliding_window"]))
    return ev.BlockStored(
        block_hashes=hashes,
        parent_block_hash=draw(st.one_of(st.none(), HASH)),
        token_ids=draw(st.lists(st.integers(0, 1 << 31), min_size=n * bs, max_size=n * bs)),
        block_size=bs,
        lora_id=draw(st.one_of(st.none(), st.integers(1, 1 << 20))),
        medium=medium,
        lora_name=draw(st.one_of(st.none(), TEXT)),
        extra_keys=draw(
            st.one_of(
                st.none(),
                st.lists(
                    st.one_of(st.none(), st.tuples(KEY, MM_PAIR), st.tuples(MM_PAIR), st.tuples()),
                    min_size=n,
                    max_size=n,
                ),
            )
        ),
        group_idx=group,
        kv_cache_spec_kind=spec,
        kv_cache_spec_sliding_window=draw(st.integers(1, 4096))
        if spec == "sliding_window"
        else None,
        locality=locality,
        ownership=ownership,
        session_id=draw(st.one_of(st.none(), TEXT)),
        lookahead_token_ids=draw(
            st.one_of(
                st.none(),
                st.lists(st.lists(st.integers(0, 1 << 31), max_size=3), min_size=n, max_size=n),
            )
        ),
    )


def test_pagedsim_knows_every_field_vllms_events_define(vllm):
    """A field vLLM adds would otherwise be read past, and lost from a saved stream."""
    ev = vllm.events
    for theirs, ours in [
        (ev.BlockStored, ke.BlockStored),
        (ev.BlockRemoved, ke.BlockRemoved),
        (ev.AllBlocksCleared, ke.AllBlocksCleared),
    ]:
        assert set(theirs.__struct_fields__) == set(ours.__dataclass_fields__), theirs


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_batch_of_vllms_structs_reads_back_field_by_field(vllm, data):
    import msgspec

    ev = vllm.events
    events = data.draw(st.lists(vllm_events(ev), max_size=5))
    rank = data.draw(st.one_of(st.none(), st.integers(0, 7)))
    payload = msgspec.msgpack.Encoder().encode(
        ev.KVEventBatch(ts=time.time(), events=events, data_parallel_rank=rank)
    )
    batch = ks.decode_payload(payload)
    assert batch.data_parallel_rank == rank and len(batch.events) == len(events)
    for theirs, ours in zip(events, batch.events, strict=True):
        assert type(ours).__name__ == type(theirs).__name__
        assert {k: getattr(ours, k) for k in theirs.__struct_fields__} == _vllm_fields(theirs)
    again = ke.read_batches([json.dumps(ke.batch_to_json(batch))])[0]
    assert again.events == batch.events  # and a save as JSON lines keeps every field


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stored(sub: Subscriber) -> list[Any]:
    return [
        h
        for b in sub.batches()
        for e in b.events
        if isinstance(e, ke.BlockStored)
        for h in e.block_hashes
    ]


def test_a_restarted_vllm_publisher_is_read_as_a_second_run(vllm):
    """vLLM's publisher restarted on the same endpoint numbers its batches from 0 again;
    before, pagedsim's subscriber dropped those as replays of batches it held."""
    ev, port = vllm.events, _port()
    sub = Subscriber(f"tcp://127.0.0.1:{port}", topic="kv", bind=True)
    try:
        for run in range(2):
            pub = ev.ZmqEventPublisher(0, endpoint=f"tcp://127.0.0.1:{port}", topic="kv")
            first, deadline = sub.num_events, time.monotonic() + 20
            while sub.num_events == first and time.monotonic() < deadline:  # connecting
                pub.publish(ev.KVEventBatch(ts=time.time(), events=[ev.AllBlocksCleared()]))
                sub.poll(100)
            for k in range(3):
                event = ev.BlockStored([run * 100 + k], None, [1], 1, None, None, None)
                pub.publish(ev.KVEventBatch(ts=time.time(), events=[event]))
            for _ in range(20 if run == 0 else 0):  # the first run's seqs pass the second's
                pub.publish(ev.KVEventBatch(ts=time.time(), events=[ev.AllBlocksCleared()]))
            last = ev.BlockStored([run * 100 + 99], None, [1], 1, None, None, None)
            pub.publish(ev.KVEventBatch(ts=time.time(), events=[last]))  # in order: the end
            while run * 100 + 99 not in _stored(sub) and time.monotonic() < deadline:
                sub.poll(100)
            pub.shutdown()
    finally:
        sub.close()
    assert _stored(sub) == [0, 1, 2, 99, 100, 101, 102, 199]
    notes = [n for _, ns in ks.sequence_notes(sub.batches()) for n in ns]
    assert any("again after" in n for n in notes), notes
