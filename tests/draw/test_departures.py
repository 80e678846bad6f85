"""Sequences that leave the pool are marked in the frame where they leave: finished, or preempted
until the step they come back (`render.departures`, drawn as dashed rows under the tables)."""

import pytest

from pagedsim import KVCacheManager, story
from pagedsim.draw.render import Layout, departures, render

pytestmark = pytest.mark.draw


def test_a_sequence_freed_for_good_is_marked_finished_in_the_frame_it_leaves(tour_snaps):
    gone = departures(tour_snaps)
    k = next(i for i, s in enumerate(tour_snaps) if "seq A finishes" in story.caption(s))
    assert gone[k] == (("A", None),)
    assert all(g == () for i, g in enumerate(gone) if i != k)
    ax = render(tour_snaps[k], layout=Layout.for_snapshots(tour_snaps)).axes[0]
    marks = [p.get_gid() for p in ax.patches if (p.get_gid() or "").startswith("gone-")]
    assert marks == ["gone-A"]
    why = next(t for t in ax.texts if t.get_gid() == "gone-why-A")
    assert why.get_text() == "finished: its blocks are freed"
    later = render(tour_snaps[k + 1], layout=Layout.for_snapshots(tour_snaps)).axes[0]
    assert not [t for t in later.texts if (t.get_gid() or "").startswith("gone-")]  # marked once


def test_a_sequence_that_comes_back_is_marked_preempted_until_its_return_step():
    m = KVCacheManager(8, 4)
    m.add_sequence("a", 5)
    m.add_sequence("b", 3)
    m.free_sequence("a")  # preempted (recompute): its blocks go back to the pool
    m.append_tokens("b", 2)
    m.add_sequence("a", 6)  # and it comes back
    snaps = m.trace.snapshots
    gone = departures(snaps)
    left = next(i for i, g in enumerate(gone) if g)
    assert gone[left] == (("a", snaps[-1].step),)
    layout = Layout.for_snapshots(snaps)
    assert layout.departed(snaps[left].step) == gone[left]
    ax = render(snaps[left], layout=layout).axes[0]
    why = next(t for t in ax.texts if t.get_gid() == "gone-why-a")
    assert why.get_text() == f"preempted: out of the pool until step {snaps[-1].step}"


def test_rows_are_reserved_for_the_departed_so_no_mark_falls_off_the_table():
    m = KVCacheManager(8, 2)
    for s in "abc":
        m.add_sequence(s, 2)
    m.free_sequence("a")
    m.free_sequence("b")
    m.free_sequence("c")  # one step each: at most one departure per frame, three rows at most
    assert Layout.for_snapshots(m.trace.snapshots).table_rows == 3


def test_generate_frames_are_numbered_by_engine_step_and_carry_the_whole_steps_events():
    from pagedsim.engine.generate import serve, step_frames

    llm, _ = serve(backend="numpy")
    engine, marks = llm.llm_engine, llm.steps
    frames = step_frames(engine, marks)
    assert [f.step for f in frames] == list(range(1, len(engine.log) + 1))
    told = [story.caption(f) for f in frames]
    assert all(c.startswith("batch ") and "engine step" not in c for c in told)
    snaps = engine.manager.trace.snapshots
    assert sum(len(f.events) for f in frames) == sum(
        len(s.events) for s in snaps[: marks[-1].snapshot + 1]
    )
    finished = {sid for g in departures(frames) for sid, back in g if back is None}
    assert finished == {q.seq_id for s in snaps for q in s.sequences}  # everyone finishes, once
