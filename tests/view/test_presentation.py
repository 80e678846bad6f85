"""Presentation mode in Chromium: sizes follow the screen, chrome hides, a legend stays, the
URL keeps the mode, and a caption is at most two lines."""

import pytest

from pagedsim.app import tour as tour_app
from pagedsim.app.play_session import Options, Session
from pagedsim.view import sources, to_html

from .test_page_in_chromium import check_not_blank, shots

pytestmark = pytest.mark.slow

# The share of the window that the page's content covers: the union of the boxes of the
# caption, the tables, the tiles, the free list and the legend, over the window's area.
COVERED = """() => {
    const boxes = [...document.querySelectorAll(
        '#headline, #why, #tables .table, #blocks .block, #free-list, #legend')]
        .filter((e) => e.offsetParent !== null).map((e) => e.getBoundingClientRect());
    const left = Math.max(0, Math.min(...boxes.map((r) => r.left)));
    const top = Math.max(0, Math.min(...boxes.map((r) => r.top)));
    const right = Math.min(innerWidth, Math.max(...boxes.map((r) => r.right)));
    const bottom = Math.min(innerHeight, Math.max(...boxes.map((r) => r.bottom)));
    const tiles = [...document.querySelectorAll('#blocks .block')]
        .map((e) => e.getBoundingClientRect());
    return {covered: (right - left) * (bottom - top) / (innerWidth * innerHeight),
            tiles: tiles.reduce((a, r) => a + r.width * r.height, 0) / (innerWidth * innerHeight),
            allTilesShown: tiles.every((r) => r.top >= 0 && r.bottom <= innerHeight &&
                                              r.left >= 0 && r.right <= innerWidth)};
}"""

SHOWN = "(sel) => { const e = document.querySelector(sel); return !!e && e.offsetParent !== null; }"


@pytest.fixture(scope="module")
def tour_html():
    return to_html(**tour_app.tour_page("en"))


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080), (3840, 2160)])
def test_a_12_block_tour_fills_a_16_9_screen_in_presentation_mode(
    open_page, tour_html, tmp_path, size
):
    loaded = open_page(tour_html, fragment="#step=5&present", viewport=size)
    page = loaded.page
    assert page.evaluate("document.body.classList.contains('projector')")
    fill = page.evaluate(COVERED)
    assert fill["covered"] >= 0.85 and fill["allTilesShown"], fill
    assert fill["tiles"] >= 0.25, fill  # the tiles themselves, not only the frame, are large
    assert not page.evaluate(SHOWN, "#controls") and not page.evaluate(SHOWN, "#keys")
    assert page.evaluate(SHOWN, "#legend")
    assert "shared" in page.inner_text("#legend") and "free-list head" in page.inner_text("#legend")
    shot = shots(tmp_path) / f"tour-present-{size[0]}x{size[1]}.png"
    page.screenshot(path=str(shot))
    check_not_blank(shot)
    page.mouse.move(size[0] // 2, size[1] // 2)
    page.mouse.move(size[0] // 3, size[1] // 3)
    assert page.evaluate(SHOWN, "#controls")  # a mouse move shows the chrome
    loaded.check_clean()


def test_links_keep_presentation_mode_and_p_toggles_it(open_page, tour_html):
    loaded = open_page(tour_html, fragment="#step=2&present", viewport=(1920, 1080))
    page = loaded.page
    page.keyboard.press("ArrowRight")
    assert page.evaluate("location.hash") == "#step=3&present"
    page.keyboard.press("p")
    assert page.evaluate("location.hash") == "#step=3"
    assert not page.evaluate("document.body.classList.contains('projector')")
    assert page.evaluate(SHOWN, "#controls")
    page.keyboard.press("P")
    assert page.evaluate("location.hash") == "#step=3&present"
    page.evaluate("location.hash = '#step=7'")  # a link without the flag leaves the mode
    page.wait_for_function("() => window.pagedsimViewer.index() === 7")
    assert not page.evaluate("document.body.classList.contains('projector')")
    page.keyboard.press("f")  # full screen may be refused headless; it must raise nothing
    loaded.check_clean()


def test_a_long_caption_is_two_lines_with_the_details_on_hover(open_page):
    session = Session(Options(64, 4))
    for c in ("alloc A 100", "fork A B", "append B", "free A"):
        session.run(c)
    snaps = session.timeline("en")
    loaded = open_page(to_html(**sources.play(session)), fragment="#step=2&present")
    page = loaded.page
    for i in (2, 4):
        page.evaluate(f"window.pagedsimViewer.go({i})")
        head = page.evaluate("""() => { const e = document.querySelector('#headline');
            return {text: e.textContent, title: e.title, lines: e.scrollHeight /
                    parseFloat(getComputedStyle(e).lineHeight)}; }""")
        assert head["lines"] <= 2.05, head
        assert head["text"].endswith("(details on hover)") and " 25 blocks" in head["text"], head
        assert head["title"] == snaps[i].custom_caption
        assert loaded.dom()["caption"] == snaps[i].custom_caption  # the DOM contract holds
    loaded.check_clean()


# Each timeline row and each host-pane tile: wholly inside the window and every pane that
# scrolls it (the left column once cut the request timeline at 1366x768).
WHOLE = """(sel) => [...document.querySelectorAll(sel)].map((e) => {
    const r = e.getBoundingClientRect();
    let ok = r.height > 0 && r.top >= 0 && r.bottom <= innerHeight && r.left >= 0 &&
             r.right <= innerWidth;
    for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
        const s = getComputedStyle(p);
        if (!/(auto|scroll|hidden)/.test(s.overflow + s.overflowX + s.overflowY)) continue;
        const c = p.getBoundingClientRect();
        ok = ok && r.top >= c.top - 1 && r.bottom <= c.bottom + 1;
    }
    return ok;
})"""


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_a_generate_page_shows_its_whole_timeline_and_the_host_in_presentation_mode(
    open_page, tmp_path, size
):
    from pagedsim.config import CacheConfig
    from pagedsim.engine.generate import Workload, serve

    llm, _ = serve(
        workload=Workload(max_tokens=24),
        cache=CacheConfig(block_size=8, num_gpu_blocks_override=24),
        check_dense=False,
    )
    engine, marks = llm.llm_engine, llm.steps
    page = sources.generate(engine, marks)
    requests = len(page["options"].story["timeline"])
    assert requests >= 10  # the default mix: enough rows to overflow a short column
    llm, _ = serve(
        workload=Workload(
            ["ROMEO: But soft, what light", "JULIET: O Romeo, Romeo", "NURSE: Madam"], 12
        ),
        cache=CacheConfig(block_size=4, num_gpu_blocks_override=12),
        check_dense=False,
    )
    swap, swap_marks = llm.llm_engine, llm.steps
    for i in range(0, len(page["options"].captions), 7):
        loaded = open_page(to_html(**page), fragment=f"#step={i}&present", viewport=size)
        rows = loaded.page.evaluate(WHOLE, "#timeline .tl-row")
        assert len(rows) == requests and all(rows), (i, rows)
        assert loaded.page.evaluate(SHOWN, "#legend")
        loaded.check_clean()
    swapped = sources.generate(swap, swap_marks)
    out = next(i for i, m in swapped["options"].marks.items() if "out" in m)
    loaded = open_page(to_html(**swapped), fragment=f"#step={out}&present", viewport=size)
    held = swapped["options"].story["host"][out]
    tiles = loaded.page.evaluate(
        "[...document.querySelectorAll('#host [data-host-seq]')].map(e => e.dataset.hostSeq)"
    )
    assert tiles == [q for q, n in held for _ in range(n)] and tiles
    assert all(loaded.page.evaluate(WHOLE, "#host [data-host-seq]"))
    shot = shots(tmp_path) / f"generate-swap-present-{size[0]}x{size[1]}.png"
    loaded.page.screenshot(path=str(shot))
    check_not_blank(shot)
    loaded.check_clean()


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080), (3840, 2160)])
def test_the_changed_outline_grows_with_the_screen(open_page, tour_html, size):
    """A fixed 3 px outline is a hairline on a 4K projector: in presentation mode the
    outline of what a step changed is at least 0.2% of the 16:9 box the window holds."""
    loaded = open_page(tour_html, fragment="#step=5&present", viewport=size)
    widths = loaded.page.evaluate(
        """() => [...document.querySelectorAll('#blocks .block.touched, #tables .cell.touched')]
                 .map((e) => parseFloat(getComputedStyle(e).outlineWidth))"""
    )
    box = min(size[0], size[1] * 16 / 9)
    assert len(widths) >= 2 and min(widths) >= 0.002 * box, (widths, box)
    loaded.check_clean()


@pytest.fixture(scope="module")
def small_blocks_html():
    """`generate`'s mix on 96 blocks of 2 tokens: step 7 allocates, frees, releases 48 blocks
    and fills, so its "changed" strip holds more than a line."""
    from .test_changes_in_view import mix_page

    return to_html(**mix_page(2, 96, 16))


# Each part of the strip: its lines (a wrapped part is taller than one), and whether what
# it holds spills out of its box.
STRIP_PARTS = """() => [...document.querySelectorAll('#changes > *')].map((e) => {
    const line = parseFloat(getComputedStyle(e).lineHeight) ||
        1.3 * parseFloat(getComputedStyle(e).fontSize);
    return [e.className, Math.round(e.getBoundingClientRect().height / line),
            e.scrollHeight > e.clientHeight + 1];
})"""


@pytest.mark.parametrize("mode", ["", "&present"])
@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_the_changed_strip_keeps_one_line(open_page, small_blocks_html, size, mode):
    """The strip is one line high in a wide window and when presented. Presented, its lead
    and groups wrapped inside it, so "changed this" lost its "step:" and the links' boxes
    showed as orange slivers under the line; in a wide window a group that did not fit went
    whole to a hidden second line ("filled" at step 7). A long group is now cut at its end
    instead, and the short ones stay whole."""
    loaded = open_page(small_blocks_html, fragment="#step=7" + mode, viewport=size)
    parts = loaded.page.evaluate(STRIP_PARTS)
    assert [c for c, _, _ in parts][:2] == ["lead", "chg k-a"], parts
    assert all(lines == 1 and not spilled for _, lines, spilled in parts), parts
    whole = loaded.page.evaluate(
        """() => [...document.querySelectorAll('#changes > :not(.long)')].every((e) =>
            e.scrollWidth <= e.clientWidth + 1 && e.getBoundingClientRect().right <= innerWidth)"""
    )
    assert whole
    kinds = loaded.page.evaluate(
        """() => [...document.querySelectorAll('#changes > .chg')].map((e) => [e.dataset.kind,
            e.getBoundingClientRect().bottom <=
                e.parentElement.getBoundingClientRect().bottom + 1])"""
    )
    assert [k for k, _ in kinds] == ["allocated", "freed", "released", "filled"], kinds
    assert all(shown for _, shown in kinds), kinds
    loaded.check_clean()


@pytest.mark.parametrize("size, cols", [((1366, 768), 16), ((1920, 1080), 16), ((3840, 2160), 16)])
def test_a_big_pool_fills_the_pool_pane_when_presented(open_page, size, cols):
    """A big pool's rows of 32 wrap in lines of 32, 16, 8 or 4 tiles. Presented, its tiles
    were 5.4 units whatever the pane, so at 1920x1080 16 did not fit and 8 left 40% of the
    pane empty, and at 1366x768 8 columns held a third of what 16 of 44 px do; they now
    shrink (not below 3.2 units) to the most columns that fill it, a small tile's text in
    the hover box."""
    session = Session(Options(400, 16))
    session.run("alloc A 700")
    loaded = open_page(to_html(**sources.play(session)), fragment="#step=1&present", viewport=size)
    got = loaded.page.evaluate(
        """() => {
            const wrap = document.querySelector('#blocks-wrap').getBoundingClientRect();
            const tiles = [...document.querySelectorAll('#blocks .block')].slice(0, 32)
                .map((e) => e.getBoundingClientRect());
            const u = parseFloat(document.documentElement.style.getPropertyValue('--u'));
            return {cols: tiles.filter((r) => r.top === tiles[0].top).length,
                    right: Math.max(...tiles.map((r) => r.right)), pane: [wrap.left, wrap.right],
                    width: tiles[0].width / u, text: getComputedStyle(
                        document.querySelector('#blocks .block .txt')).display};
        }"""
    )
    left, right = got["pane"]
    assert got["cols"] == cols, got
    assert got["right"] <= right and 3.2 <= got["width"] <= 5.4 + 1e-6, got
    assert got["right"] >= right - 0.1 * (right - left), got  # the last tenth: it fills
    assert (got["text"] == "none") == (got["width"] < 4.5), got  # text too big for a tile
    loaded.check_clean()
