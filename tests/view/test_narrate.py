"""The `generate` page's plain captions and request timeline, checked against the engine's
own log and the manager's snapshots."""

import re

import pytest

from pagedsim.config import CacheConfig
from pagedsim.engine.generate import Workload, run, step_frames
from pagedsim.engine.lockstep import seq_name
from pagedsim.view import page_data, sources
from pagedsim.view.narrate import narrate, visible

CACHE = CacheConfig(block_size=8, num_gpu_blocks_override=24)

WROTE = re.compile(
    r"(\S+) (?:generated '.*?' into|wrote token \d+ into) block (\d+) \(slot (\d+) of (\d+)\)"
)


@pytest.fixture(scope="module")
def served():
    engine, marks, _ = run(workload=Workload(max_tokens=24), cache=CACHE)
    return engine, step_frames(engine, marks)


def test_each_decode_caption_names_the_block_and_slot_the_engine_wrote(served):
    engine, frames = served
    told = narrate(frames, engine.log)
    checked = 0
    for i, caption in enumerate(told.captions):
        spans = {s.split("[")[0]: s for s in engine.log[i]["seqs"]}
        tables = {seq_name(s.seq_id): s.blocks for s in frames[i].sequences}
        for seq, block, slot, size in WROTE.findall(caption):
            start = int(spans[seq].split("[")[1].split(":")[0])
            assert int(size) == frames[i].block_size
            assert tables[seq][start // int(size)] == int(block)
            assert int(slot) == start % int(size) + 1
            checked += 1
        assert told.details[i] == "batch " + " ".join(engine.log[i]["seqs"])
        assert "batch r" not in caption  # the notation is the detail, not the caption
    assert checked > 40


def test_the_timeline_orders_each_sequences_life(served):
    engine, frames = served
    told = narrate(frames, engine.log)
    assert {q for q, *_ in told.timeline} == {
        s.split("[")[0] for rec in engine.log for s in rec["seqs"]
    }
    for _q, first, preempted, finished in told.timeline:
        assert all(first <= p for p in preempted)
        assert finished == -1 or all(p < finished for p in preempted)
    assert any(pre for _, _, pre, _ in told.timeline)  # this pool is short: someone waits
    assert all(end >= 0 for *_, end in told.timeline)  # and every request ends


def test_the_page_carries_the_plain_captions_the_details_and_the_timeline():
    engine, marks, _ = run(workload=Workload(max_tokens=24), cache=CACHE)
    data = page_data(**sources.generate(engine, marks))
    assert all(step["dt"].startswith("batch ") for step in data["steps"])
    assert data["timeline"] and not any("finishes" in s["c"] for s in data["steps"])


def test_whitespace_is_visible():
    assert visible("a b\nc\td") == "a\u00b7b\u21b5c\u2192d"
