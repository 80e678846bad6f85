"""Checks for exercise 3.6: the core flow diagram, drawn from a pool's trace (chapter 3.6).

A short scenario runs on pagedsim's KVCacheManager (admit, fork, finish, copy-on-write);
the picture of every snapshot is then read back through its artists, found by gid:
colours of free and used blocks, ref-count labels, one arrow per table entry landing
on the right physical block, and the free list head first. No pixels are compared.
"""

import types

import matplotlib
import matplotlib.figure
import matplotlib.image

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import same_color  # noqa: E402

# lesson 3.6's scenario: A (6 tokens), B (3) and D (5) arrive; A forks C; B and D finish (the
# free list is then 3, 4, 2, 5, 6, 7: not in block order); C appends (copy-on-write)
from course.ch03_kv_block.lessons.l3_6 import manager_snapshots as scenario  # noqa: E402
from course.i18n import say  # noqa: E402
from course.impl import child_module  # noqa: E402
from pagedsim import KVCacheManager  # noqa: E402
from pagedsim.story import caption  # noqa: E402
from pagedsim.testing.remote_caps import Callback  # noqa: E402

EXERCISE = "3.6"
pytestmark = [pytest.mark.ch3_6, pytest.mark.draw]


def scenario_of_several_rows():
    """The tour's pool (12 blocks of 4: two rows), sequences with int ids admitted out of order (3,
    1, 2), so that rows taken from a set or sorted ids differ from snapshot.sequences' order in
    every process, whatever PYTHONHASHSEED is; one sequence reaches blocks 8..11 (second row)."""
    m = KVCacheManager(12, 4)
    m.add_sequence(3, 10)
    m.add_sequence(1, 13)
    m.add_sequence(2, 9)
    m.free_sequence(1)
    m.append_tokens(2, 8)
    return m.trace.snapshots


def scenario_with_no_sequences():
    """Everything admitted is freed: no tables at all, every block free."""
    m = KVCacheManager(5, 2)
    m.add_sequence("A", 3)
    m.free_sequence("A")
    return m.trace.snapshots[-1:]


SCENARIOS = (
    ("", scenario),
    (" of the 12-block pool", scenario_of_several_rows),
    (" with no sequences", scenario_with_no_sequences),
)


def labelled(snap, label):
    """The snapshot's fields, its step named with the scenario (messages say which picture)."""
    fields = ("num_gpu_blocks", "block_size", "free_list", "ref_counts", "sequences")
    return types.SimpleNamespace(
        **{f: getattr(snap, f) for f in fields}, step=f"{snap.step}{label}"
    )


def drawn(impl, snap):
    fig, ax = impl.new_axes(snap)
    impl.draw_flow(snap, ax)
    artists = {a.get_gid(): a for a in ax.get_children() if a.get_gid()}
    artists["_limits"] = (ax.get_xlim(), ax.get_ylim())
    artists["_texts"] = [
        (t.get_text(), t.get_position(), t.get_horizontalalignment()) for t in ax.texts
    ]
    artists["_axes"] = (ax.get_aspect(), ax.axison)
    plt.close(fig)
    return artists


def centre_and_size(box):
    """(centre x, centre y, width, height) of a Rectangle, in data coordinates."""
    (x, y), w, h = box.get_xy(), box.get_width(), box.get_height()
    return x + w / 2, y + h / 2, w, h


@pytest.fixture(scope="module")
def pictures(impl):
    return [
        (labelled(snap, label), drawn(impl, snap)) for label, make in SCENARIOS for snap in make()
    ]


def test_every_physical_block_is_drawn_grey_when_free_and_coloured_when_used(impl, pictures):
    """block-B rectangles: one per physical block, FREE_COLOUR exactly when its count is 0."""
    for snap, art in pictures:
        for b in range(snap.num_gpu_blocks):
            box = art.get(f"block-{b}")
            assert box is not None, say(
                f"step {snap.step}: no rectangle with gid block-{b}",
                f"第 {snap.step} 步：没有 gid 为 block-{b} 的矩形",
            )
            want = impl.FREE_COLOUR if snap.ref_counts[b] == 0 else impl.USED_COLOUR
            assert same_color(box.get_facecolor(), want), say(
                f"step {snap.step}: block {b} has count {snap.ref_counts[b]} but is drawn "
                f"{'as used' if snap.ref_counts[b] == 0 else 'as free'}",
                f"第 {snap.step} 步：Block {b} 的计数是 {snap.ref_counts[b]}，却画成了"
                f"{'已用' if snap.ref_counts[b] == 0 else '空闲'}",
            )


def test_used_blocks_show_their_reference_count(impl, pictures):
    """count-B texts: present for every used block and equal to its count (2 when shared)."""
    for snap, art in pictures:
        for b, count in enumerate(snap.ref_counts):
            label = art.get(f"count-{b}")
            if count:
                shown = label.get_text() if label else None
                assert shown == str(count), say(
                    f"step {snap.step}: block {b} is held by {count} sequence(s) but its count "
                    f"label says {shown or 'nothing'}",
                    f"第 {snap.step} 步：Block {b} 被 {count} 个序列持有，但计数标签写的是 "
                    f"{shown or '空'}",
                )
            else:
                assert label is None, say(
                    f"step {snap.step}: free block {b} should have no count label",
                    f"第 {snap.step} 步：空闲 Block {b} 不应有计数标签",
                )


def test_each_table_entry_has_an_arrow_to_its_physical_block(impl, pictures):
    """map-S-I arrows start at table entry I of S and end on the physical block it names."""
    for snap, art in pictures:
        arrows = [g for g in art if g.startswith("map-")]
        want = sum(len(s.blocks) for s in snap.sequences)
        assert len(arrows) == want, say(
            f"step {snap.step}: {len(arrows)} arrows for {want} table entries",
            f"第 {snap.step} 步：{want} 个表项却有 {len(arrows)} 个箭头",
        )
        for row, seq in enumerate(snap.sequences):
            for i, b in enumerate(seq.blocks):
                arrow = art.get(f"map-{seq.seq_id}-{i}")
                assert arrow is not None, say(
                    f"step {snap.step}: no arrow map-{seq.seq_id}-{i}",
                    f"第 {snap.step} 步：没有箭头 map-{seq.seq_id}-{i}",
                )
                assert tuple(arrow.xy) == impl.pool_xy(b), say(
                    f"step {snap.step}: seq {seq.seq_id}'s logical block {i} maps to physical "
                    f"block {b}, but its arrow ends at {tuple(arrow.xy)} instead of pool_xy({b}) = "
                    f"{impl.pool_xy(b)}",
                    f"第 {snap.step} 步：序列 {seq.seq_id} 的逻辑块 {i} 映射到物理块 {b}，但箭头"
                    f"终点是 {tuple(arrow.xy)}，而不是 pool_xy({b}) = {impl.pool_xy(b)}",
                )
                problem = row_problem(
                    impl,
                    snap,
                    f"map-{seq.seq_id}-{i}",
                    arrow.xyann,
                    f"step {snap.step}: arrow map-{seq.seq_id}-{i} starts at {tuple(arrow.xyann)}",
                    f"第 {snap.step} 步：箭头 map-{seq.seq_id}-{i} 从 {tuple(arrow.xyann)} 出发",
                )
                assert not problem, problem
                assert tuple(arrow.xyann) == impl.table_xy(row, i, snap.num_gpu_blocks), say(
                    f"step {snap.step}: arrow map-{seq.seq_id}-{i} should start at its table entry",
                    f"第 {snap.step} 步：箭头 map-{seq.seq_id}-{i} 应从它的表项出发",
                )
                cell = art.get(f"table-{seq.seq_id}-{i}")
                assert cell is not None, say(
                    f"step {snap.step}: no rectangle table-{seq.seq_id}-{i}",
                    f"第 {snap.step} 步：没有矩形 table-{seq.seq_id}-{i}",
                )


def row_problem(impl, snap, gid, xy, where, where_zh) -> str:
    """'' unless the table entry `gid` (table-S-I or map-S-I) sits in another sequence's row."""
    sid, index = gid.split("-", 1)[1].rsplit("-", 1)
    order = [s.seq_id for s in snap.sequences]
    rows = [
        r
        for r in range(len(order))
        if impl.table_xy(r, int(index), snap.num_gpu_blocks) == pytest.approx(tuple(xy))
    ]
    mine = [str(s) for s in order].index(sid)
    if not rows or rows[0] == mine:
        return ""
    return say(
        f"{where}: sequence {sid}'s table is drawn in row {rows[0]}, but it is row {mine} of "
        f"snapshot.sequences ({order}): number the rows with enumerate(snapshot.sequences), not "
        "in the order of a set, a dict's keys or sorted ids (a set of strings even changes order "
        "from run to run)",
        f"{where_zh}：序列 {sid} 的表画在第 {rows[0]} 行，但它在 snapshot.sequences（{order}）中"
        f"是第 {mine} 行：用 enumerate(snapshot.sequences) 给行编号，不要用集合、字典的键或排序"
        "后的 id 的顺序（字符串集合的顺序甚至每次运行都会变）",
    )


def misplaced(impl, snap, gid, got, centre) -> str:
    """'' when the box `gid` is centred on `centre`, else why it is not, in words."""
    (cx, cy), (x, y) = got, centre
    if max(abs(cx - x), abs(cy - y)) < 1e-6:
        return ""
    where = f"step {snap.step}: {gid} is centred at ({cx:.2f}, {cy:.2f}), not at {centre}"
    where_zh = f"第 {snap.step} 步：{gid} 的中心在 ({cx:.2f}, {cy:.2f})，不在 {centre}"
    half = impl.CELL / 2
    if abs(cx - x - half) < 1e-6 and abs(cy - y - half) < 1e-6:
        return say(
            f"{where}: a Rectangle's xy is its lower-left corner, so pass (x - CELL / 2, "
            "y - CELL / 2)",
            f"{where_zh}：Rectangle 的 xy 是左下角，所以要传 (x - CELL / 2, y - CELL / 2)",
        )
    if gid.startswith("table-"):
        wrong_row = row_problem(impl, snap, gid, (cx, cy), where, where_zh)
        if wrong_row:
            return wrong_row
        return say(
            f"{where}: centre each table entry on table_xy(row, i, snapshot.num_gpu_blocks)",
            f"{where_zh}：每个表项要以 table_xy(row, i, snapshot.num_gpu_blocks) 为中心",
        )
    return say(
        f"{where}: centre block B on pool_xy(B), which starts a new row every PER_ROW = "
        f"{impl.PER_ROW} blocks (the pool has {snap.num_gpu_blocks}); never place blocks by their "
        "id alone",
        f"{where_zh}：块 B 要以 pool_xy(B) 为中心，它每 PER_ROW = {impl.PER_ROW} 个块换一行"
        f"（池里有 {snap.num_gpu_blocks} 个）；不要只按块号摆放",
    )


def test_boxes_sit_on_their_centres_and_the_axes_show_them_all(impl, pictures):
    """block-B is a CELL x CELL square centred on pool_xy(B), table-S-I on table_xy; nothing is cut
    off."""
    for snap, art in pictures:
        (x0, x1), (y0, y1) = art["_limits"]
        boxes = [(f"block-{b}", impl.pool_xy(b)) for b in range(snap.num_gpu_blocks)]
        boxes += [
            (f"table-{seq.seq_id}-{i}", impl.table_xy(row, i, snap.num_gpu_blocks))
            for row, seq in enumerate(snap.sequences)
            for i in range(len(seq.blocks))
        ]
        for gid, centre in boxes:
            if gid not in art:
                continue  # reported by the checks above
            cx, cy, w, h = centre_and_size(art[gid])
            problem = misplaced(impl, snap, gid, (cx, cy), centre)
            assert not problem, problem
            assert abs(w - impl.CELL) < 1e-6 and abs(h - impl.CELL) < 1e-6, say(
                f"step {snap.step}: {gid} is {w:.2f} x {h:.2f}, expected CELL x CELL = {impl.CELL} "
                f"x {impl.CELL}",
                f"第 {snap.step} 步：{gid} 是 {w:.2f} x {h:.2f}，应为 CELL x CELL = {impl.CELL} x "
                f"{impl.CELL}",
            )
            assert (
                x0 <= cx - w / 2 and cx + w / 2 <= x1 and y0 <= cy - h / 2 and cy + h / 2 <= y1
            ), say(
                f"step {snap.step}: {gid} lies outside the axes' limits x {x0:.1f}..{x1:.1f}, y "
                f"{y0:.1f}..{y1:.1f}: "
                "finish with ax.set_xlim / ax.set_ylim so the whole picture shows",
                f"第 {snap.step} 步：{gid} 超出了坐标范围 x {x0:.1f}..{x1:.1f}，y "
                f"{y0:.1f}..{y1:.1f}：最后用 ax.set_xlim / ax.set_ylim 让整张图都显示出来",
            )
        for b, count in enumerate(snap.ref_counts):
            label = art.get(f"count-{b}")
            if count and label is not None:
                lx, ly = label.get_position()
                bx, by = impl.pool_xy(b)
                assert abs(lx - bx) < impl.CELL / 2 and abs(ly - by) < impl.CELL / 2, say(
                    f"step {snap.step}: the count of block {b} is written at ({lx:.2f}, {ly:.2f}), "
                    f"outside its box",
                    f"第 {snap.step} 步：Block {b} 的计数写在 ({lx:.2f}, {ly:.2f})，在方框之外",
                )
        text = art.get("free-list")
        if text is not None:
            tx, ty = text.get_position()
            assert x0 <= tx <= x1 and y0 <= ty <= y1, say(
                f"step {snap.step}: the free-list text at ({tx:.1f}, {ty:.1f}) lies outside the "
                f"axes",
                f"第 {snap.step} 步：空闲链表文字在 ({tx:.1f}, {ty:.1f})，超出了坐标范围",
            )
            edge = impl.table_xy(0, 0, snap.num_gpu_blocks)[0] - impl.CELL / 2
            below = impl.table_xy(len(snap.sequences), 0, snap.num_gpu_blocks)[1]
            assert abs(tx - edge) <= impl.CELL / 2 and abs(ty - below) < 1e-6, say(
                f"step {snap.step}: the free-list text starts at ({tx:.2f}, {ty:.2f}); it belongs "
                f"under the tables' left edge (x near {edge:.2f}), one row below the last table (y "
                f"{below:.2f})",
                f"第 {snap.step} 步：空闲链表文字从 ({tx:.2f}, {ty:.2f}) 开始；它应在各表左边缘之下"
                f"（x 接近 {edge:.2f}），最后一个表再往下一行（y {below:.2f}）",
            )
            top = impl.pool_xy(0)[1] + impl.CELL / 2
            assert x0 >= edge - 2.1 and y1 <= top + 1 and y0 >= ty - 1.05, say(
                f"step {snap.step}: the axes' limits x {x0:.1f}..{x1:.1f}, y {y0:.1f}..{y1:.1f} "
                f"leave wide blank "
                "margins: keep at most one unit around the picture (two on the left)",
                f"第 {snap.step} 步：坐标范围 x {x0:.1f}..{x1:.1f}，y {y0:.1f}..{y1:.1f} 留了很宽的"
                "空白：图四周最多留一个单位（左边两个）",
            )


def test_the_layout_helpers_keep_their_documented_grid_and_the_drawing_uses_them(impl, pictures):
    """pool_xy: PER_ROW blocks per row, one unit apart; table_xy: one unit below the pool, rows 1.3
    apart."""
    _, artists = pictures[0]
    box = artists.get("block-0")
    assert box is not None and centre_and_size(box)[:2] == pytest.approx(impl.pool_xy(0)), say(
        "block 0's box should be centred on pool_xy(0): draw every block with the given helper",
        "块 0 的方框应以 pool_xy(0) 为中心：用给定的辅助函数画每个块",
    )
    for b in range(20):
        assert impl.pool_xy(b) == (b % impl.PER_ROW, -(b // impl.PER_ROW)), say(
            f"pool_xy({b}) is {impl.pool_xy(b)}: keep the given pool_xy (column b % PER_ROW, row b "
            f"// PER_ROW)",
            f"pool_xy({b}) 是 {impl.pool_xy(b)}：保留给定的 pool_xy（列 b % PER_ROW，行 b // "
            f"PER_ROW）",
        )
    for n in (1, 8, 9, 17):
        for row in range(3):
            want = (3.0, -(-(-n // impl.PER_ROW) + 1.0 + 1.3 * row))
            assert impl.table_xy(row, 3, n) == pytest.approx(want), say(
                f"table_xy({row}, 3, {n}) is {impl.table_xy(row, 3, n)}, expected {want}: keep the "
                f"given table_xy",
                f"table_xy({row}, 3, {n}) 是 {impl.table_xy(row, 3, n)}，应为 {want}：保留给定的 "
                f"table_xy",
            )


def test_every_block_and_entry_is_labelled_inside_its_square(impl, pictures):
    """'#B' in each block, the physical id in each table entry, 'seq S' left of its row; equal
    aspect, no axes."""
    for snap, art in pictures:
        assert art["_axes"] == (1.0, False), say(
            f"step {snap.step}: new_axes should give an equal aspect (squares stay square) and no "
            f"axis lines",
            f"第 {snap.step} 步：new_axes 应设等比例（正方形保持正方形）并去掉坐标轴线",
        )
        texts = art["_texts"]

        def inside(label, centre, texts=texts):
            return any(
                t == label
                and abs(x - centre[0]) < impl.CELL / 2
                and abs(y - centre[1]) < impl.CELL / 2
                for t, (x, y), _ in texts
            )

        for b in range(snap.num_gpu_blocks):
            assert inside(f"#{b}", impl.pool_xy(b)), say(
                f"step {snap.step}: block {b}'s square has no '#{b}' label inside",
                f"第 {snap.step} 步：Block {b} 的方框里没有 '#{b}' 标签",
            )
        for row, seq in enumerate(snap.sequences):
            for i, b in enumerate(seq.blocks):
                assert inside(str(b), impl.table_xy(row, i, snap.num_gpu_blocks)), say(
                    f"step {snap.step}: entry {i} of seq {seq.seq_id} should show its physical "
                    f"block {b} inside",
                    f"第 {snap.step} 步：序列 {seq.seq_id} 的第 {i} 个表项里应显示它的物理块 {b}",
                )
            x0, y0 = impl.table_xy(row, 0, snap.num_gpu_blocks)
            left = x0 - impl.CELL / 2
            assert any(
                t == f"seq {seq.seq_id}"
                and abs(y - y0) < 1e-6
                and left - 1 <= x < left
                and ha == "right"
                for t, (x, y), ha in texts
            ), say(
                f"step {snap.step}: no 'seq {seq.seq_id}' label right-aligned less than a unit "
                f"left of its row",
                f"第 {snap.step} 步：该行左侧不到一个单位处没有右对齐的 'seq {seq.seq_id}' 标签",
            )
        for b, count in enumerate(snap.ref_counts):
            ids = [y for t, (x, y), _ in texts if t == f"#{b}"]
            label = art.get(f"count-{b}")
            if count and ids and label is not None:
                assert ids[0] > label.get_position()[1], say(
                    f"step {snap.step}: block {b}'s '#{b}' label should sit above its count, not "
                    f"below it",
                    f"第 {snap.step} 步：Block {b} 的 '#{b}' 标签应在计数之上，而不是之下",
                )


def test_the_free_list_is_written_head_first(impl, pictures):
    """The free-list text lists free blocks in allocate() order, not sorted."""
    for snap, art in pictures:
        text = art.get("free-list")
        want = "free list: " + (" -> ".join(map(str, snap.free_list)) or "empty")
        got = text.get_text() if text is not None else None
        assert got == want, say(
            f"step {snap.step}: the free list reads {got!r}, expected {want!r} (head first)",
            f"第 {snap.step} 步：空闲链表写的是 {got!r}，应为 {want!r}（从表头开始）",
        )


def test_a_trace_becomes_one_titled_png_per_step(impl, monkeypatch):
    """draw_trace writes step-NN.png per snapshot, titled with the step's sentence, and closes its
    figures."""
    titles, save = [], matplotlib.figure.Figure.savefig

    def spy(fig, *args, **kwargs):
        titles.append(fig.axes[0].get_title())
        return save(fig, *args, **kwargs)

    # the student's figure calls it: a Callback is the one form a function may cross in
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", Callback(spy))
    snaps, open_before = scenario()[-2:], len(plt.get_fignums())
    # a folder where the file runs (in a sandbox it can write nowhere else); a str must work
    folder = child_module("tempfile").mkdtemp(prefix="draw-trace-")
    paths = impl.draw_trace(snaps, folder)
    names = [p.name for p in paths]
    assert names == ["step-06.png", "step-07.png"], say(
        f"draw_trace wrote {names}, expected ['step-06.png', 'step-07.png'] (step-NN.png per "
        f"snapshot)",
        f"draw_trace 写出了 {names}，应为 ['step-06.png', 'step-07.png']（每个快照一个 "
        f"step-NN.png）",
    )
    assert titles == [f"step {s.step}: {caption(s)}" for s in snaps], say(
        f"the pictures are titled {titles}", f"图片的标题是 {titles}"
    )
    assert len(plt.get_fignums()) == open_before, say(
        "draw_trace leaves figures open: close each after saving",
        "draw_trace 留下了未关闭的图：每张保存后都要关闭",
    )
    for p in paths:
        pixels = matplotlib.image.imread(p)[..., :3]  # [h, w, 3] in 0..1
        inked = float((pixels.min(axis=2) < 0.9).mean())
        assert inked > 0.05, say(
            f"{p.name} is almost blank ({inked:.1%} of its pixels are drawn)",
            f"{p.name} 几乎是空白的（只画了 {inked:.1%} 的像素）",
        )
