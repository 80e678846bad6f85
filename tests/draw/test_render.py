"""The renderer, tested by its artists: one patch per block, colours, badges, caption, purity."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_hex

from pagedsim import KVCacheManager, OutOfBlocks, SequenceError, palette, story
from pagedsim.draw import style
from pagedsim.draw.render import Layout, describe_artists, render
from pagedsim.io import trace_json

pytestmark = pytest.mark.draw


def by_gid(fig, pattern):
    rx = re.compile(pattern)
    return {
        a.get_gid(): a
        for a in fig.axes[0].get_children()
        if a.get_gid() and rx.fullmatch(a.get_gid())
    }


def check_consistent(snap, fig):
    """What every rendered snapshot must satisfy, whatever the state."""
    blocks = by_gid(fig, r"block-\d+")
    assert len(blocks) == snap.num_gpu_blocks
    badges = by_gid(fig, r"badge-\d+")
    colours = style.seq_colours([snap])
    for b in range(snap.num_gpu_blocks):
        face = to_hex(blocks[f"block-{b}"].get_facecolor())
        if snap.ref_counts[b] == 0:
            assert face == to_hex(palette.FREE), f"free block {b} is not drawn in the free colour"
            assert f"badge-{b}" not in badges
        else:
            assert face == to_hex(colours[snap.owners(b)[0]])
            assert badges[f"badge-{b}"].get_text() == str(snap.ref_counts[b])
            stripes = by_gid(fig, rf"share-{b}-\d+")
            assert len(stripes) == len(snap.owners(b)) - 1
    caption = " ".join(by_gid(fig, "caption")["caption"].get_text().split())
    assert " ".join(story.caption(snap).split()) in caption


def test_every_tour_step_draws_one_patch_per_block_with_correct_colours_and_badges(tour_snaps):
    for snap in tour_snaps:
        check_consistent(snap, render(snap))


def test_a_shared_block_shows_both_owners_and_a_count_of_two(tour_snaps):
    fork = next(s for s in tour_snaps if any(e.kind == "sequence_forked" for e in s.events))
    fig = render(fork)
    shared = [b for b in range(fork.num_gpu_blocks) if fork.ref_counts[b] == 2]
    assert shared, "the fork step should share blocks"
    for b in shared:
        assert by_gid(fig, f"badge-{b}")[f"badge-{b}"].get_text() == "2"
        assert len(by_gid(fig, rf"share-{b}-\d+")) == 1


def test_the_caption_names_the_event_of_the_step(tour_snaps):
    cow = next(s for s in tour_snaps if any(e.kind == "copy_on_write" for e in s.events))
    text = by_gid(render(cow), "caption")["caption"].get_text()
    assert "copy-on-write" in text and text.startswith(f"step {cow.step}:")
    failed = tour_snaps[-1]
    assert "OutOfBlocks" in by_gid(render(failed), "caption")["caption"].get_text()


def test_a_pending_copy_is_drawn_as_an_arrow_from_src_to_dst(tour_snaps):
    cow = next(s for s in tour_snaps if s.pending_copies)
    ((src, dst),) = cow.pending_copies
    assert set(by_gid(render(cow), r"copy-\d+-\d+")) == {f"copy-{src}-{dst}"}


def test_blocks_named_by_the_steps_events_get_a_highlight_frame_and_no_others(tour_snaps):
    finish = next(s for s in tour_snaps if any(e.kind == "sequence_freed" for e in s.events))
    released = {e.block for e in finish.events if e.kind == "block_released"}
    assert released
    assert set(by_gid(render(finish), r"touched-\d+")) == {f"touched-{b}" for b in released}
    assert not by_gid(render(tour_snaps[0]), r"touched-\d+")


def test_the_free_list_is_drawn_head_first_in_allocate_order(tour_snaps):
    snap = tour_snaps[8]  # after A finishes: LIFO puts its blocks at the head
    fig = render(snap)
    nodes = by_gid(fig, r"free-\d+")
    texts = {round(t.get_position()[0], 3): t.get_text() for t in fig.axes[0].texts}
    drawn = [texts[round(nodes[f"free-{i}"].get_x() + 0.35, 3)] for i in range(len(nodes))]
    assert drawn == [str(b) for b in snap.free_list]


def test_fill_bars_are_proportional_to_tokens_per_block(tour_snaps):
    snap = tour_snaps[3]
    fig = render(snap)
    full = by_gid(fig, r"fill-\d+")
    widths = {int(g.split("-")[1]): p.get_width() for g, p in full.items()}
    biggest = max(widths.values())
    for b, w in widths.items():
        assert w == pytest.approx(biggest * snap.block_fill[b] / snap.block_size)


def test_a_crowded_pool_of_64_blocks_and_9_sequences_fits_without_clipping(crowded):
    fig = render(crowded)
    check_consistent(crowded, fig)
    assert len(crowded.sequences) > 8
    assert any("more sequences" in t.get_text() for t in fig.axes[0].texts)
    fig.canvas.draw()
    renderer, box = fig.canvas.get_renderer(), fig.bbox
    for t in fig.axes[0].texts:
        ext = t.get_window_extent(renderer)
        assert box.x0 <= ext.x0 and ext.x1 <= box.x1 and box.y0 <= ext.y0 and ext.y1 <= box.y1, (
            t.get_text()
        )
    assert min(t.get_fontsize() for t in fig.axes[0].texts) >= 6.5


def test_a_long_free_list_is_cut_short_and_says_how_many_are_left():
    snap = KVCacheManager(64, 8).trace.snapshots[0]  # all 64 blocks free
    fig = render(snap)
    shown = len(by_gid(fig, r"free-\d+"))
    assert 10 < shown < 64
    assert by_gid(fig, "free-tail")["free-tail"].get_text() == f"... +{64 - shown} more"


def test_an_empty_free_list_says_the_next_allocate_fails(tour_snaps):
    assert not tour_snaps[-1].free_list
    fig = render(tour_snaps[-1])
    assert not by_gid(fig, r"free-\d+")
    assert "empty" in by_gid(fig, "free-tail")["free-tail"].get_text()


def test_render_is_pure_same_snapshot_same_artists_and_the_snapshot_is_unchanged(tour_snaps):
    snap = tour_snaps[6]
    before = trace_json.snapshot_to_dict(snap)
    first = describe_artists(render(snap))
    assert describe_artists(render(snap)) == first
    assert trace_json.snapshot_to_dict(snap) == before
    assert describe_artists(render(tour_snaps[7])) != first


def test_a_layout_for_another_pool_size_is_refused(tour_snaps, crowded):
    with pytest.raises(ValueError, match="layout is for 64 blocks"):
        render(tour_snaps[0], layout=Layout.for_snapshots([crowded]))
    with pytest.raises(ValueError, match="snapshots must not be empty"):
        Layout.for_snapshots([])


@st.composite
def manager_runs(draw):
    """A small manager driven by a random mix of admit / append / fork / free calls."""
    m = KVCacheManager(
        draw(st.integers(1, 12)),
        draw(st.integers(1, 4)),
        free_order=draw(st.sampled_from(["lifo", "fifo"])),
    )
    for i in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(["add", "append", "fork", "free"]))
        seqs = m.seq_ids()
        try:
            if op == "add" or not seqs:
                m.add_sequence(f"q{i}", draw(st.integers(0, 9)))
            elif op == "append":
                m.append_tokens(draw(st.sampled_from(seqs)), draw(st.integers(1, 5)))
            elif op == "fork":
                m.fork(draw(st.sampled_from(seqs)), f"q{i}")
            else:
                m.free_sequence(draw(st.sampled_from(seqs)))
        except (OutOfBlocks, SequenceError):
            pass
    return m


@settings(max_examples=12)
@given(manager_runs(), st.data())
def test_any_reachable_state_renders_with_consistent_artists(m, data):
    snaps = m.trace.snapshots
    snap = snaps[data.draw(st.integers(0, len(snaps) - 1))]
    check_consistent(snap, render(snap))
