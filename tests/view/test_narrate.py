"""The `generate` page's plain captions and request timeline, checked against the engine's
own log and the manager's snapshots."""

import re

import pytest

from pagedsim.config import CacheConfig
from pagedsim.engine.generate import Workload, serve, step_frames
from pagedsim.engine.lockstep import seq_name
from pagedsim.view import page_data, sources, to_html
from pagedsim.view.narrate import narrate, visible

CACHE = CacheConfig(block_size=8, num_gpu_blocks_override=24)

WROTE = re.compile(
    r"(\S+) (?:generated '.*?' into|wrote token \d+ into) (?:new )?block (\d+) "
    r"\(slot (\d+) of (\d+)\)"
)


@pytest.fixture(scope="module")
def mix():
    llm, _ = serve(workload=Workload(max_tokens=24), cache=CACHE)
    engine, marks = llm.llm_engine, llm.steps
    return engine, marks


@pytest.fixture(scope="module")
def served(mix):
    engine, marks = mix
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


COPIED = re.compile(
    r"^(\S+) generated '(.*)' into (?:new )?block (\d+) \(slot \d+ of \d+\), "
    r"copied on write from block (\d+)$"
)


@pytest.mark.parametrize("cache", [CACHE, CacheConfig()], ids=["8x24", "default"])
def test_a_decode_into_a_copy_on_write_copy_names_its_token(cache):
    """A beam or a parallel sample that writes into a shared block gets a copy first; its
    caption still says which token it generated: the text the copy holds beyond what its
    source held before the step (the block text the page shows), never a bare position."""
    llm, _ = serve(workload=Workload(max_tokens=24), cache=cache)
    engine = llm.llm_engine
    frames = step_frames(engine, llm.steps)
    told = narrate(frames, engine.log)
    checked = 0
    for i, caption in enumerate(told.captions):
        assert "wrote token" not in caption, (i, caption)
        for part in caption.split("; "):
            m = COPIED.match(part)
            if not m:
                continue
            token, dst, src = m.group(2, 3, 4)
            held = frames[i - 1].block_labels[int(src)]
            now = frames[i].block_labels[int(dst)]
            assert token and visible(now) == visible(held) + token, (i, part)
            checked += 1
    assert checked >= 5  # the shipped workload's beams and samples copy on write


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
    llm, _ = serve(workload=Workload(max_tokens=24), cache=CACHE)
    engine, marks = llm.llm_engine, llm.steps
    data = page_data(**sources.generate(engine, marks))
    assert all(step["dt"].startswith("batch ") for step in data["steps"])
    assert data["timeline"] and not any("finishes" in s["c"] for s in data["steps"])


def test_whitespace_is_visible():
    assert visible("a b\nc\td") == "a\u00b7b\u21b5c\u2192d"


# The blocks a caption says a step gave out: "got new blocks 0, 1", "into new block 6", and
# "swapped back in: ... into blocks 2, 3".
NEW = re.compile(
    r"got new blocks? ([\d, ]+)|into new block (\d+)|host memory into blocks ([\d, ]+)"
)


def named_new(caption: str) -> set:
    return {int(x) for m in NEW.finditer(caption) for g in m.groups() if g for x in g.split(",")}


def strip_new(step: dict) -> set:
    """The blocks the page's "changed" strip lists as taken this step: allocated, hit,
    swapped in, or evicted to be reused (its ref count rose from 0)."""
    rose = set(step.get("r", [])[::2])
    kinds = zip(step.get("e", []), step.get("ek", ""), strict=True)
    return {b for b, k in kinds if k in "ahi" or (k == "v" and b in rose)}


@pytest.fixture(scope="module")
def swapping():
    """Three requests on 12 blocks of 4 tokens: the v0 engine swaps one out, then back in."""
    llm, _ = serve(
        workload=Workload(
            ["ROMEO: But soft, what light", "JULIET: O Romeo, Romeo", "NURSE: Madam"], 12
        ),
        cache=CacheConfig(block_size=4, num_gpu_blocks_override=12),
        check_dense=False,
    )
    engine, marks = llm.llm_engine, llm.steps
    assert any(rec.get("preempted_swap") for rec in engine.log)
    return engine, marks


@pytest.mark.parametrize("which", ["mix", "swap"])
def test_each_caption_names_the_blocks_its_changed_strip_lists_as_new(mix, swapping, which):
    data = page_data(**sources.generate(*(mix if which == "mix" else swapping)))
    named = 0
    for i, step in enumerate(data["steps"]):
        assert named_new(step["c"]) == strip_new(step), (i, step["c"], step.get("e"))
        named += bool(strip_new(step))
    assert named >= 3


def test_a_swapped_request_is_told_preempted_and_held_in_host_memory(swapping):
    engine, marks = swapping
    page = sources.generate(engine, marks)
    snaps, host, captions = (
        page["trace_or_snapshots"],
        page["options"].story["host"],
        page["options"].captions,
    )
    outs = [i for i, rec in enumerate(engine.log) if rec.get("preempted_swap")]
    assert [i for i, m in page["options"].marks.items() if "out" in m] == outs
    for i in outs:
        live = {seq_name(s.seq_id) for s in snaps[i].sequences}
        before = {seq_name(s.seq_id): s.blocks for s in snaps[i - 1].sequences}
        for q, n in host[i]:
            assert q not in live and n == len(before[q])  # its whole table is on the host
            assert f"{q} was preempted and swapped out" in captions[i]
            assert f"{q} finished" not in captions[i]
            back = next(j for j in range(i, len(snaps)) if q not in {x for x, _ in host[j]})
            assert q in {seq_name(s.seq_id) for s in snaps[back].sequences}
            assert (
                "in" in page["options"].marks[back] and f"{q} was swapped back in" in captions[back]
            )
    assert all(not row for row in host[: outs[0]])


def test_the_page_badge_names_the_scheduler_that_served_the_run(swapping):
    from pagedsim.config import SchedulerConfig

    llm, _ = serve(  # plain prompts under recompute: the v1 engine serves them
        workload=Workload(["ROMEO: But soft", "JULIET: O Romeo"], 4),
        scheduler=SchedulerConfig(preemption_mode="recompute"),
        check_dense=False,
    )
    served_v1 = llm.llm_engine, llm.steps
    assert (served_v1[0].mode, swapping[0].mode) == ("v1", "v0")
    for engine, marks in (served_v1, swapping):
        version = sources.generate(engine, marks)["options"].version
        other = "v1" if engine.mode == "v0" else "v0"
        assert f"Scheduler{engine.mode.upper()}" in version, (engine.mode, version)
        assert f"Scheduler{other.upper()}" not in version, (engine.mode, version)


@pytest.mark.parametrize("max_tokens", [1, 2, 3])
def test_a_request_done_within_one_step_is_told_finished_and_on_the_timeline(max_tokens):
    """With max_tokens 2 the mix's r3.0 (its prompt all cached) runs one step and is gone
    before any snapshot holds it; with max_tokens 1 every request does. `generate --html`
    once refused its own page for it, then left such a request off the timeline (with
    max_tokens 1, no timeline at all)."""
    llm, _ = serve(workload=Workload(max_tokens=max_tokens), check_dense=False)
    engine, marks = llm.llm_engine, llm.steps
    frames = step_frames(engine, marks)
    told = narrate(frames, engine.log)
    assert all(end >= 0 for *_, end in told.timeline), told.timeline  # every request ends
    data = page_data(**sources.generate(engine, marks))
    scheduled = {s.split("[")[0] for rec in engine.log for s in rec["seqs"]}
    assert [q for q, *_ in data["timeline"]] == [q for q, *_ in told.timeline]
    assert {q for q, *_ in data["timeline"]} == scheduled
    drawn = {seq_name(s.seq_id) for f in frames for s in f.sequences}
    if max_tokens == 1:  # every request came and went within the first step
        assert not drawn and all(row[1] == row[3] == 0 for row in data["timeline"])


def test_the_page_draws_a_timeline_row_for_a_request_no_snapshot_holds(open_page):
    """In Chromium: a row per request, including those done within one step, with its
    finish mark at that step, and no page error."""
    llm, _ = serve(workload=Workload(max_tokens=1), check_dense=False)
    engine, marks = llm.llm_engine, llm.steps
    loaded = open_page(to_html(**sources.generate(engine, marks)))
    rows = loaded.page.evaluate("""() => [...document.querySelectorAll('#timeline .tl-row')]
        .map(r => [r.dataset.request, r.querySelectorAll('.tl-end').length,
                   r.querySelector('.tl-run').getBoundingClientRect().width])""")
    scheduled = sorted({s.split("[")[0] for rec in engine.log for s in rec["seqs"]})
    assert sorted(q for q, _, _ in rows) == scheduled and scheduled
    assert all(ends == 1 and width > 0 for _, ends, width in rows), rows
    assert loaded.page.evaluate("!document.getElementById('timeline').hidden")
    loaded.check_clean()
