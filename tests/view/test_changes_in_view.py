"""Every step draws what it changed, in view: walking a page step by step, each block whose
state differs from the step before (ref count, fill, cached flag, free-list membership, text,
hash) and each table cell that differs is outlined, and is inside the window and every
pane that scrolls it, with nothing drawn over it. Tour, a playground page with every
operation, and `generate`."""

import contextlib

import pytest

from pagedsim.app import tour as tour_app
from pagedsim.app.play_session import Options, Refused, Session
from pagedsim.engine.lockstep import seq_name
from pagedsim.view import page_data, sources, to_html

from .conftest import long_script

pytestmark = pytest.mark.slow

# Every operation: allocate, fill, fork (share), copy-on-write, free, prefix-cache hash and
# hit, eviction of a cached block, swap out to the host and back in.
EVERY_OPERATION = [
    "alloc A 6 p",
    "append A 3",
    "fork A B",
    "append B",
    "append A",
    "free A",
    "free B",
    "alloc C 8 p",
    "alloc D 9 q",
    "alloc E 8 r",
    "evict D",
    "alloc F 12 s",
    "free E",
    "resume D",
    "append C 2",
]

# In view: at least half of the element's height inside the window and every pane that
# scrolls it, and the middle of what shows is the element (nothing is drawn over it).
IN_VIEW = """(sel) => {
    const seen = (e) => {
        const r = e.getBoundingClientRect();
        if (r.width === 0) return false;
        let top = Math.max(r.top, 0), bottom = Math.min(r.bottom, innerHeight);
        let left = Math.max(r.left, 0), right = Math.min(r.right, innerWidth);
        for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
            const s = getComputedStyle(p);
            if (!/(auto|scroll|hidden)/.test(s.overflow + s.overflowX + s.overflowY)) continue;
            const c = p.getBoundingClientRect();
            top = Math.max(top, c.top); bottom = Math.min(bottom, c.bottom);
            left = Math.max(left, c.left); right = Math.min(right, c.right);
        }
        if (bottom - top < r.height / 2 || right <= left) return false;
        const hit = document.elementFromPoint((left + right) / 2, (top + bottom) / 2);
        return !!hit && (hit === e || e.contains(hit));
    };
    return [...document.querySelectorAll(sel)].map((e) => [e.dataset.block,
        e.closest('[data-seq]') ? e.closest('[data-seq]').dataset.seq : null,
        e.dataset.logical === undefined ? null : +e.dataset.logical, seen(e)]);
}"""


FRAME = "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"


def differing(prev, snap, labels=None, name=str) -> tuple[set, set]:
    """The blocks and the (seq, logical) table cells whose state differs between two steps,
    each sequence called `name(seq_id)` as the page calls it."""
    free0, free1 = set(prev.free_list), set(snap.free_list)
    cached0, cached1 = set(prev.cached_blocks), set(snap.cached_blocks)
    blocks = {
        b
        for b in range(snap.num_gpu_blocks)
        if prev.ref_counts[b] != snap.ref_counts[b]
        or prev.block_fill[b] != snap.block_fill[b]
        or (b in free0) != (b in free1)
        or (b in cached0) != (b in cached1)
        or (labels is not None and labels[0][b : b + 1] != labels[1][b : b + 1])
    }
    before = {s.seq_id: s.blocks for s in prev.sequences}
    cells = {
        (name(s.seq_id), j)
        for s in snap.sequences
        for j, b in enumerate(s.blocks)
        if j >= len(before.get(s.seq_id, ())) or before[s.seq_id][j] != b or b in blocks
    }
    return blocks, cells


def walk(open_page, page: dict, viewport=(1366, 768), labels=None, present=False) -> int:
    """Step through `page` with ArrowRight (`present`: in presentation mode); every change
    outlined and in view. Returns the number of steps that changed something."""
    snaps, name = page["trace_or_snapshots"], page["options"].names or str
    fragment = "#step=0&present" if present else ""
    loaded = open_page(to_html(**page), viewport=viewport, fragment=fragment)
    assert loaded.page.evaluate("document.body.classList.contains('projector')") == present
    changed = 0
    for i in range(1, len(snaps)):
        loaded.page.keyboard.press("ArrowRight")
        assert loaded.page.evaluate("window.pagedsimViewer.index()") == i
        loaded.page.evaluate(FRAME)  # a big pool scrolls in the frame after the step change
        pair = (labels[i - 1], labels[i]) if labels else None
        blocks, cells = differing(snaps[i - 1], snaps[i], pair, name)
        if not blocks and not cells:
            continue
        changed += 1
        tiles = loaded.page.evaluate(IN_VIEW, "#blocks .block.touched")
        marked = {int(b): seen for b, _, _, seen in tiles}
        assert blocks <= set(marked), f"step {i}: blocks {blocks - set(marked)} not outlined"
        assert all(marked[b] for b in blocks), f"step {i}: outlined blocks out of view {tiles}"
        lit = loaded.page.evaluate(IN_VIEW, "#tables .cell.touched")
        shown = {(q, j): seen for _, q, j, seen in lit}
        assert cells <= set(shown), f"step {i}: cells {cells - set(shown)} not outlined"
        assert all(shown[c] for c in cells), f"step {i}: outlined cells out of view {lit}"
        strip = loaded.page.evaluate(
            "[...document.querySelectorAll('#changes [data-goto]')].map(e => +e.dataset.goto)"
        )
        assert blocks <= set(strip) or len(strip) >= 12, f"step {i}: {blocks} vs strip {strip}"
    loaded.check_clean()
    return changed


SCREENS = [(1366, 768), (1920, 1080), (3840, 2160)]
MODES = [pytest.param(False, id="default"), pytest.param(True, id="present")]


@pytest.mark.parametrize("present", MODES)
@pytest.mark.parametrize("viewport", SCREENS)
def test_every_tour_step_outlines_its_changes_in_view(open_page, viewport, present):
    assert walk(open_page, tour_app.tour_page("en"), viewport, present=present) >= 10


def run_session(options: Options, commands) -> Session:
    session = Session(options)
    for c in commands:
        try:
            session.run(c)
        except Refused as e:
            raise AssertionError(f"{c}: {e}") from None
    return session


@pytest.mark.parametrize("present", MODES)
def test_every_playground_operation_outlines_its_changes_in_view(open_page, present):
    session = run_session(
        Options(12, 4, enable_prefix_caching=True, preemption_mode="swap"), EVERY_OPERATION
    )
    page = sources.play(session)
    kinds = "".join(s.get("ek", "") for s in page_data(**page)["steps"])
    assert set("ahcsoixfv") <= set(kinds), kinds  # every kind of change occurs
    assert walk(open_page, page, present=present) == len(page["trace_or_snapshots"]) - 1


@pytest.mark.parametrize("blocks, commands, seed", [(400, 40, 3), (4096, 60, 2)])
@pytest.mark.parametrize("present", MODES)
def test_a_big_pool_brings_each_change_into_view(open_page, present, blocks, commands, seed):
    """A big pool (rows of 32 tiles, drawn when seen) at 1366x768: no changed tile is off to
    the side or below the fold, in either mode. On 4,096 blocks, forks and new tables land
    far from the tables they share blocks with: the tables between fold, and the tables'
    pane is not scrolled away by the kernel's view, drawn below them as it comes into sight."""
    session = Session(Options(blocks, 16))
    for c in long_script(commands, blocks, 16, seed=seed):
        with contextlib.suppress(Refused):
            session.run(c)
    assert walk(open_page, sources.play(session), present=present) >= 30


# A's twelve blocks lie two rows of 32 tiles apart (0, 65, ..., 715), eleven tables of 64
# blocks between them; `fork A D` (step 24) shares all twelve.
SPREAD = ["alloc A 16"] + [c for k in range(11) for c in (f"alloc F{k} 1024", "append A 16")]
SPREAD += ["fork A D", "append D 1"]
FOLDS = """() => [[...document.querySelectorAll('#blocks .fold')].map((f) => f.textContent),
    document.querySelectorAll('#blocks .row.folded').length,
    [...document.querySelectorAll('#tables .fold')].map((f) => f.textContent),
    document.querySelector('#blocks').classList.contains('squeezed')]"""


@pytest.mark.parametrize("present", MODES)
def test_a_big_pool_folds_and_squeezes_what_lies_between_its_changes(open_page, present):
    """4,096 blocks at 1366x768: a fork whose changed tiles span 23 rows of tiles, and whose
    changed cells have eleven tables between them. The eleven rows and tables between fold to
    marks, and the twelve changed rows, still taller than the pane, become one line each for
    that step, with the rows after them folded too; every change is in view. The step before
    folds nothing, and going back to it restores the pool."""
    page = sources.play(run_session(Options(4096, 16), SPREAD))
    assert [s.blocks for s in page["trace_or_snapshots"][24].sequences if s.seq_id == "D"] == [
        tuple(65 * k for k in range(12))
    ]
    assert walk(open_page, page, present=present) == len(SPREAD)
    mode = "&present" if present else ""
    loaded = open_page(to_html(**page), viewport=(1366, 768), fragment="#step=24" + mode)
    loaded.page.evaluate(FRAME)
    between = [f"\u2026 {64 * k + 32}\u2013{64 * k + 63}" for k in range(11)]
    folded = [[*between, "\u2026 736\u20134095"], 11 + 128 - 23, ["\u202611 tables"], True]
    assert loaded.page.evaluate(FOLDS) == folded
    loaded.page.set_viewport_size({"width": 1360, "height": 760})  # the folds are measured anew
    loaded.page.evaluate(FRAME)
    assert loaded.page.evaluate(FOLDS) == folded
    loaded.page.keyboard.press("ArrowLeft")
    loaded.page.evaluate(FRAME)
    assert loaded.page.evaluate(FOLDS) == [[], 0, [], False]
    loaded.check_clean()


# 200 blocks of 2 tokens: A holds blocks 0 and 151 with B's 150 blocks between them; the
# fork (step 4) changes the two ends, the free (step 5) 150 tiles in a run.
APART = ["alloc A 2", "alloc B 300", "append A 2", "fork A D", "free B", "append D 1"]
TILES = """() => [[...document.querySelectorAll('#blocks .fold')].map((f) => f.textContent),
    document.querySelectorAll('#blocks .block.folded').length,
    document.querySelector('#blocks').classList.contains('squeezed'),
    document.querySelector('#blocks .block').getBoundingClientRect().width]"""


@pytest.mark.parametrize("present", MODES)
def test_a_small_pool_folds_and_shrinks_what_lies_between_its_changes(open_page, present):
    """A small pool is one row of tiles that wraps, 12 lines of them at 1366x768. Its changed
    tiles that span more than the pane fold the unchanged run between them to one mark (the
    fork), and a run of changed tiles taller than the pane shrinks the tiles for that step
    (the free): every change is in view, and the next step gives the pool back as it was.
    Presented, the tiles are fitted to the pane and nothing folds."""
    page = sources.play(run_session(Options(200, 2), APART))
    assert [s.blocks for s in page["trace_or_snapshots"][4].sequences] == [
        (0, 151),
        tuple(range(1, 151)),
        (0, 151),
    ]
    assert walk(open_page, page, present=present) == len(APART)
    mode = "&present" if present else ""
    loaded = open_page(to_html(**page), viewport=(1366, 768), fragment="#step=3" + mode)
    states = []
    for key in ["ArrowRight", "ArrowRight", "ArrowRight", "ArrowLeft"]:
        loaded.page.keyboard.press(key)
        loaded.page.evaluate(FRAME)
        states.append(loaded.page.evaluate(TILES))
    whole = states[2][3]  # step 6 changes one tile: the pool as it is
    if present:
        assert all(s == [[], 0, False, whole] for s in states), states
    else:
        assert states[0] == [["\u2026 1\u2013150"], 150, False, whole]
        assert states[1][:3] == [[], 0, True] and states[1][3] < whole
        assert states[2] == [[], 0, False, whole] and whole == 58
        assert states[3][:3] == [[], 0, True]
        # the fork again; presented it fits; back in the default mode it folds, once
        for key, folds in [("ArrowLeft", states[0]), ("p", [[], 0, False]), ("p", states[0])]:
            loaded.page.keyboard.press(key)
            loaded.page.evaluate(FRAME)
            assert loaded.page.evaluate(TILES)[: len(folds)] == folds, key
    loaded.check_clean()


@pytest.mark.parametrize("present", MODES)
def test_every_generate_step_outlines_its_changes_in_view(open_page, present):
    from pagedsim.config import CacheConfig
    from pagedsim.engine.generate import Workload, serve

    llm, _ = serve(
        workload=Workload(["ROMEO: But soft, what light", "JULIET: O Romeo"], 10),
        cache=CacheConfig(block_size=8, num_gpu_blocks_override=16),
    )
    engine, marks = llm.llm_engine, llm.steps
    page = sources.generate(engine, marks)
    steps = len(page["options"].labels) - 1
    assert walk(open_page, page, labels=page["options"].labels, present=present) == steps


@pytest.mark.parametrize("viewport", SCREENS)
def test_the_shipped_generate_page_keeps_its_changes_in_view_when_presented(open_page, viewport):
    """The page the lecture plan projects (`pagedsim generate --html`): six sequences' tables
    beside an 18-request timeline. At 1366x768 they fit only without the token counts, which
    presentation mode then leaves out, so every changed cell stays on screen."""
    from pagedsim.engine.generate import serve

    llm, _ = serve()
    page = sources.generate(llm.llm_engine, llm.steps)
    labels = page["options"].labels
    assert walk(open_page, page, viewport, labels=labels, present=True) >= 40


def mix_page(block_size: int, blocks: int, max_tokens: int) -> dict:
    """`generate`'s page of the shipped mix of requests on a pool of `blocks` blocks."""
    from pagedsim.config import CacheConfig
    from pagedsim.engine.generate import Workload, serve

    llm, _ = serve(
        workload=Workload(max_tokens=max_tokens),
        cache=CacheConfig(block_size=block_size, num_gpu_blocks_override=blocks),
        check_dense=False,
    )
    return sources.generate(llm.llm_engine, llm.steps)


def test_tables_too_long_for_their_column_widen_it_when_presented(open_page):
    """The shipped mix on a pool of 24 blocks of 8: six tables of up to 13 blocks beside a
    16-request timeline. At 1366x768, in a quarter of the screen, they did not fit even at
    the smallest text, and r2.1's changed cell was below the column's edge at step 2; the
    column now widens and the tiles are fitted to what is left."""
    page = mix_page(8, 24, 24)
    labels = page["options"].labels
    assert walk(open_page, page, (1366, 768), labels=labels, present=True) >= 40


ROWS = """() => [...document.querySelectorAll('#tables [data-seq]')].map((r) => [r.dataset.seq,
    [...r.querySelectorAll('[data-block]')].map((c) => +c.dataset.block),
    [...r.querySelectorAll('.fold')].reduce((n, f) => n + +f.textContent.slice(1), 0),
    r.querySelectorAll('.cell.folded').length])"""


@pytest.mark.parametrize("present", MODES)
def test_tables_longer_than_their_pane_fold_to_what_changed(open_page, present):
    """Six tables of up to 49 blocks of 2 tokens: a decode step writes the last cell of each,
    too far apart for one pane at 1366x768. Each row folds the cells the step left alone
    ("0 ...46 47 48"), so every changed cell is in view, and still lists every block."""
    page = mix_page(2, 96, 16)
    snaps, labels = page["trace_or_snapshots"], page["options"].labels
    loaded = open_page(
        to_html(**page), viewport=(1366, 768), fragment="#step=0" + ("&present" if present else "")
    )
    folds = 0
    for i in range(1, 6):  # decode steps: one cell a table
        loaded.page.keyboard.press("ArrowRight")
        loaded.page.evaluate(FRAME)
        _, cells = differing(snaps[i - 1], snaps[i], (labels[i - 1], labels[i]), seq_name)
        shown = {
            (q, j): seen for _, q, j, seen in loaded.page.evaluate(IN_VIEW, "#tables .cell.touched")
        }
        assert cells and cells <= set(shown) and all(shown[c] for c in cells), (i, shown)
        rows = loaded.page.evaluate(ROWS)
        assert [[q, b] for q, b, _, _ in rows] == [
            [seq_name(s.seq_id), list(s.blocks)] for s in snaps[i].sequences
        ]
        assert all(marked == hidden for _, _, marked, hidden in rows), rows
        folds += sum(hidden for *_, hidden in rows)
    assert folds > 0  # the pane is too short for the whole tables
    loaded.page.keyboard.press("Home")  # the prefill wrote every cell: nothing folds
    assert loaded.page.evaluate("document.querySelectorAll('.fold, .cell.folded').length") == 0
    loaded.check_clean()


@pytest.mark.parametrize(
    "viewport, present, squeezed, short",
    [((1366, 768), False, False, False), ((1920, 1080), True, True, False),
     ((1366, 768), True, True, True)],
)  # fmt: skip
def test_a_step_that_changes_more_cells_than_the_pane_holds_is_squeezed_into_view(
    open_page, viewport, present, squeezed, short
):
    """The same six tables of blocks of 2: at step 7 r3.0 lets go of 48 blocks that r0.0,
    r1.0 and r1.1 share, so 111 cells change. The pane is scrolled to the first and last
    changed cells in the tables' order (the step's own writes, which it lights first, are
    neither); where they do not fit even folded (presented) the tables' text is squeezed
    for that step, and where that is not enough either (presented at 1366x768) the request
    timeline gives up half its height. The next step restores both. (Presented at 1366x768
    the walk also passes step 15, where 48 blocks sit on the host: the host's chips are
    compact and the tiles may be fitted down to 32 px, so all 96 stay on screen.)"""
    page = mix_page(2, 96, 16)
    labels = page["options"].labels
    assert walk(open_page, page, viewport, labels=labels, present=present) >= 15
    fragment = "#step=7" + ("&present" if present else "")
    loaded = open_page(to_html(**page), viewport=viewport, fragment=fragment)
    state = """() => [!!document.querySelector('#tables').style.getPropertyValue('--squeeze'),
        document.body.classList.contains('tl-short')]"""
    assert loaded.page.evaluate(state) == [squeezed, short]
    loaded.page.keyboard.press("ArrowRight")
    assert loaded.page.evaluate(state) == [False, False]
    loaded.check_clean()


@pytest.mark.parametrize("present", MODES)
def test_cells_too_many_even_squeezed_leave_out_their_logical_index(open_page, present):
    """The mix on 256 blocks of 1 token: at step 11 r2.1 and r3.0 let go of 142 shared blocks
    and 313 cells change, in tables of up to 108 cells. Squeezed to their least, they still
    did not fit the pane at 1366x768 (1,036 px for 529); the cells then leave out their
    logical index and the rows their padding, and every changed cell is in view. The next
    step gives the indexes back."""
    page = mix_page(1, 256, 24)
    labels = page["options"].labels
    assert walk(open_page, page, (1366, 768), labels=labels, present=present) >= 20
    fragment = "#step=11" + ("&present" if present else "")
    loaded = open_page(to_html(**page), viewport=(1366, 768), fragment=fragment)
    state = """() => [document.querySelector('#tables').classList.contains('bare'),
        [...document.querySelectorAll('#tables .cell sub')].some((e) => e.offsetWidth > 0)]"""
    assert loaded.page.evaluate(state) == [True, False]
    loaded.page.keyboard.press("ArrowRight")
    assert loaded.page.evaluate(state) == [False, True]
    loaded.check_clean()


@pytest.mark.parametrize("viewport", SCREENS)
def test_the_key_help_sits_under_the_panes_not_over_them(open_page, viewport):
    """In a wide window the panes scroll on their own and the key help is the page's last
    line: a changed cell or tile scrolled to a pane's foot is not under it (it was, 23 px of
    each pane, while a later rule kept the narrow window's fixed footer)."""
    session = run_session(Options(4096, 16), ["alloc A 40", "alloc B 300"])  # the pool overflows
    loaded = open_page(to_html(**sources.play(session)), viewport=viewport)
    boxes = loaded.page.evaluate(
        """() => ['#tables-pane', '#pool-pane', '#keys'].map((s) => {
            const r = document.querySelector(s).getBoundingClientRect();
            return [r.top, r.bottom]; })"""
    )
    (_, tables), (_, pool), (keys, bottom) = boxes
    assert max(tables, pool) <= keys + 0.5 and bottom <= viewport[1] + 0.5, boxes
    loaded.check_clean()


STRIP = """() => [...document.querySelectorAll('#changes [data-kind]')].map((g) => [
    g.dataset.kind, g.querySelector('b').textContent,
    [...g.querySelectorAll('[data-goto]')].map((e) => +e.dataset.goto)])"""


@pytest.fixture(scope="module")
def beams():
    """A beam search of width 2 on 4-token blocks: each step a new beam shares the prompt's
    blocks and an old beam lets go of them, so their counts drop back to where they were."""
    from pagedsim.config import CacheConfig
    from pagedsim.engine.generate import Workload, serve

    llm, _ = serve(
        workload=Workload(
            ["ROMEO: But soft, what light"], 12, overrides={"beam_width": 2, "eos": False}
        ),
        cache=CacheConfig(block_size=4, num_gpu_blocks_override=24),
        check_dense=False,
    )
    return llm.llm_engine, llm.steps


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_block_an_owner_let_go_of_is_released_by_it_not_touched(open_page, beams, lang):
    from pagedsim.engine.lockstep import seq_name

    page = sources.generate(*beams, lang=lang)
    snaps = page["trace_or_snapshots"]
    loaded = open_page(to_html(**page))
    handed = 0
    for i in range(1, len(snaps)):
        let_go: dict = {}  # block -> who released it, its count still above zero
        for e in snaps[i].events:
            if e.kind == "block_released" and e.ref_count > 0:
                let_go.setdefault(e.block, []).append(seq_name(e.seq_id))
        loaded.page.evaluate(f"window.pagedsimViewer.go({i})")
        strip = loaded.page.evaluate(STRIP)
        kinds = {b: (kind, label) for kind, label, links in strip for b in links}
        for b, who in let_go.items():
            if snaps[i].ref_counts[b] != snaps[i - 1].ref_counts[b]:
                continue  # a net change: shared, released or copied, told as before
            handed += 1
            kind, label = kinds[b]
            assert kind == "released", (i, b, strip)
            assert all(q in label for q in who), (i, b, label)
            assert ("释放" in label) == (lang == "zh") and ("released" in label) != (lang == "zh")
    assert handed >= 6  # the fixture's beams hand blocks over at several steps
    loaded.check_clean()
