"""The trace page in a real headless Chromium: its DOM states the simulator's snapshot.

Keys are pressed as a person would; every request leaving the file is refused and
recorded (none may happen); the console must stay free of errors. Screenshots go to
$PAGEDSIM_SHOTS (default: the test's tmp folder) to be looked at.
"""

import json
import os
import re
from pathlib import Path

import pytest

from pagedsim.app import tour as tour_app
from pagedsim.app.play_session import Options, Refused, Session
from pagedsim.engine.lockstep import seq_name
from pagedsim.text.captions import caption
from pagedsim.view import sources, to_html

from .conftest import expected, long_script

pytestmark = pytest.mark.slow


def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("PAGEDSIM_SHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def check_not_blank(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as im:
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 12, f"{path} looks blank"
    assert max(n for n, _ in colours) < 0.97 * sum(n for n, _ in colours), f"{path} is one colour"


def check_step(loaded, snap, text: str, last: int, grouped: bool = False, name=str) -> None:
    """The DOM states `snap`, each sequence called `name(seq_id)`; `grouped`: a hybrid page
    lists the tables group by group."""
    dom, want = loaded.dom(), expected(snap, text, name)
    assert dom["step"] == f"step {snap.step} / {last}"
    if grouped:
        dom["tables"] = sorted(dom["tables"], key=lambda t: t[0].endswith(":window"))
        want["tables"] = sorted(want["tables"], key=lambda t: t[0].endswith(":window"))
    assert {k: dom[k] for k in ("caption", "free", "refs", "fill", "tables")} == want


@pytest.fixture(scope="module")
def tour_page():
    page = tour_app.tour_page("en")
    return page, to_html(**page)


def test_every_tour_step_in_the_page_equals_the_simulators_snapshot_forwards_and_back(
    open_page, tour_page, tmp_path
):
    page, html = tour_page
    snaps, captions = page["trace_or_snapshots"], page["options"].captions
    loaded = open_page(html)
    last = snaps[-1].step
    for i, snap in enumerate(snaps):
        check_step(loaded, snap, captions[i], last)
        assert loaded.dom()["why"] == page["options"].whys[i]
        loaded.page.keyboard.press("ArrowRight")
    check_step(loaded, snaps[-1], captions[-1], last)  # ArrowRight at the end stays there
    for i in reversed(range(len(snaps))):
        check_step(loaded, snaps[i], captions[i], last)
        loaded.page.keyboard.press("ArrowLeft")
    loaded.page.keyboard.press("End")
    check_step(loaded, snaps[-1], captions[-1], last)
    assert "OutOfBlocks" in loaded.page.inner_text("#marks")
    loaded.page.keyboard.press("Home")
    check_step(loaded, snaps[0], captions[0], last)
    loaded.page.click("#next")
    loaded.page.click("#next")
    check_step(loaded, snaps[2], captions[2], last)
    loaded.page.click("#prev")
    check_step(loaded, snaps[1], captions[1], last)
    loaded.check_clean()


def test_the_tour_page_shows_copy_on_write_and_block_details_on_hover(
    open_page, tour_page, tmp_path
):
    page, html = tour_page
    snaps = page["trace_or_snapshots"]
    k = next(i for i, s in enumerate(snaps) if s.pending_copies)
    loaded = open_page(html, fragment=f"#step={k}")
    assert loaded.dom()["step"] == f"step {snaps[k].step} / {snaps[-1].step}"
    ((src, dst),) = snaps[k].pending_copies
    assert loaded.page.locator(f'#arrows [data-copy="{src}->{dst}"]').count() == 1
    loaded.page.hover(f'#blocks [data-block="{dst}"]')
    info = loaded.page.inner_text("#info")
    assert re.search(rf"block\s+{dst}\b", info) and "B" in info
    assert re.search(rf"last changed at step\s+{snaps[k].step}\b", info), info
    shot = shots(tmp_path) / "tour-copy-on-write.png"
    loaded.page.screenshot(path=str(shot), full_page=True)
    check_not_blank(shot)
    loaded.check_clean()


def test_the_url_hash_opens_the_page_at_that_step_and_follows_it(open_page, tour_page):
    page, html = tour_page
    loaded = open_page(html, fragment="#step=4")
    assert loaded.dom()["step"] == "step 4 / 11"
    loaded.page.keyboard.press("ArrowRight")
    assert loaded.page.evaluate("location.hash") == "#step=5"
    loaded.check_clean()


def test_the_scrubber_and_autoplay_move_through_the_steps(open_page, tour_page):
    page, html = tour_page
    loaded = open_page(html)
    loaded.page.eval_on_selector(
        "#scrubber", "e => { e.value = '7'; e.dispatchEvent(new Event('input')); }"
    )
    assert loaded.dom()["step"] == "step 7 / 11"
    loaded.page.select_option("#speed", "16")
    loaded.page.click("#play")
    loaded.page.wait_for_function("() => window.pagedsimViewer.index() === 11", timeout=20_000)
    assert "Play" in loaded.page.inner_text("#play")  # it stopped at the end
    loaded.check_clean()


def test_projector_mode_makes_the_caption_at_least_28px_and_block_labels_at_least_20px(
    open_page, tour_page, tmp_path
):
    page, html = tour_page
    loaded = open_page(html, fragment="#step=5", viewport=(1920, 1080))
    loaded.page.keyboard.press("p")
    sizes = loaded.page.evaluate("""() => {
        const px = e => parseFloat(getComputedStyle(e).fontSize);
        const visible = e => e.offsetParent !== null && e.textContent.trim() !== '';
        const labels = [...document.querySelectorAll(
            '#blocks [data-block] *, #tables [data-block], #free-list [data-block]')]
            .filter(visible);
        return {projector: document.body.classList.contains('projector'),
                caption: px(document.querySelector('#caption')),
                smallest: Math.min(...labels.map(px)), n: labels.length};
    }""")
    assert sizes["projector"] and sizes["n"] > 12
    assert sizes["caption"] >= 28 and sizes["smallest"] >= 20, sizes
    shot = shots(tmp_path) / "tour-projector.png"
    loaded.page.screenshot(path=str(shot))
    check_not_blank(shot)
    loaded.page.mouse.move(40, 40)  # the controls hide while presenting; a mouse move shows them
    loaded.page.mouse.move(60, 60)
    loaded.page.click("#projector")
    assert not loaded.page.evaluate("document.body.classList.contains('projector')")
    loaded.check_clean()


def run_session(options: Options, commands) -> Session:
    session = Session(options)
    for c in commands:
        try:
            session.run(c)
        except Refused:
            pass  # a command naming a sequence the pool could not admit
    return session


def test_sampled_steps_of_a_long_play_trace_equal_the_snapshots_in_any_order(open_page, tmp_path):
    session = run_session(Options(1024, 16), long_script(600, 1024, 16, seed=3))
    page = sources.play(session)
    snaps = session.timeline("en")
    assert len(snaps) > 500 and any(s.ref_counts.count(0) < 50 for s in snaps)
    loaded = open_page(to_html(**page))
    last = snaps[-1].step
    picks = [0, len(snaps) - 1, 17, 16, 15, 33, 300, 299, 1, len(snaps) // 2]
    for i in picks:  # jumps through the URL hash, across the page's checkpoints both ways
        loaded.page.evaluate(f"location.hash = '#step={i}'")
        loaded.page.wait_for_function(f"() => window.pagedsimViewer.index() === {i}")
        check_step(loaded, snaps[i], caption(snaps[i]), last)
    for _ in range(20):  # then keys: back across a checkpoint, and forwards again
        loaded.page.keyboard.press("ArrowLeft")
    check_step(loaded, snaps[len(snaps) // 2 - 20], caption(snaps[len(snaps) // 2 - 20]), last)
    for _ in range(5):
        loaded.page.keyboard.press("ArrowRight")
    check_step(loaded, snaps[len(snaps) // 2 - 15], caption(snaps[len(snaps) // 2 - 15]), last)
    shot = shots(tmp_path) / "play-long.png"
    loaded.page.screenshot(path=str(shot))
    check_not_blank(shot)
    loaded.check_clean()


@pytest.mark.parametrize("prefix_cache", [False, True], ids=["v0-lifo", "v1-prefix-cache"])
def test_a_random_walk_of_every_kind_of_step_change_keeps_the_dom_equal_to_the_snapshots(
    open_page, prefix_cache
):
    """Next, previous, short hops forwards (replayed from the shown step), far jumps both ways
    (from a checkpoint), Home and End: the page draws only what differs from what it shows,
    so after every move, in any order, the DOM must still state that step exactly. The v0
    pool frees to the head of its list, the v1 pool to the tail (and keeps cached blocks)."""
    import random

    options = Options(512, 16, enable_prefix_caching=prefix_cache)
    session = run_session(options, long_script(400, 512, 16, seed=11))
    snaps = session.timeline("en")
    loaded = open_page(to_html(**sources.play(session)))
    last, n, rng = snaps[-1].step, len(snaps), random.Random(5)
    moves = {"ArrowRight": 1, "ArrowLeft": -1}
    i = 0
    for _ in range(60):
        kind = rng.choice(["key", "key", "hop", "jump", "edge"])
        if kind == "key":
            key = rng.choice(list(moves))
            loaded.page.keyboard.press(key)
            i = min(n - 1, max(0, i + moves[key]))
        elif kind == "edge":
            key = rng.choice(["Home", "End"])
            loaded.page.keyboard.press(key)
            i = 0 if key == "Home" else n - 1
        else:
            i = min(n - 1, i + rng.randint(2, 12)) if kind == "hop" else rng.randrange(n)
            loaded.page.evaluate(f"window.pagedsimViewer.go({i})")
        assert loaded.page.evaluate("window.pagedsimViewer.index()") == i
        check_step(loaded, snaps[i], caption(snaps[i]), last)
        # a free-list element kept for reuse (no data-block) is hidden, every other shown
        assert loaded.page.evaluate("""() => [...document.getElementById('free-list').children]
            .every(e => e.hidden === !e.hasAttribute('data-block'))""")
    loaded.check_clean()


def test_a_hybrid_page_shows_both_kv_cache_groups_and_the_v1_label(open_page, tmp_path):
    session = run_session(
        Options(14, 4, sliding_window=6, hybrid=True),
        ["alloc A 10 p", "append A 4", "alloc B 10 p", "free A"],
    )
    snaps = session.timeline("en")
    loaded = open_page(to_html(**sources.play(session)), fragment="#step=3")
    check_step(loaded, snaps[3], caption(snaps[3]), snaps[-1].step, grouped=True)
    groups = loaded.page.eval_on_selector_all(
        "#tables .group",
        "gs => gs.map(g => [...g.querySelectorAll('[data-seq]')].map(e => e.dataset.seq))",
    )
    assert groups == [["A:full", "B:full"], ["A:window", "B:window"]]
    assert "v1 hybrid" in loaded.page.inner_text("#version")
    assert loaded.page.locator('#tables [data-block="-1"]').count() > 0  # the window dropped some
    shot = shots(tmp_path) / "play-hybrid.png"
    loaded.page.screenshot(path=str(shot), full_page=True)
    check_not_blank(shot)
    loaded.check_clean()


def test_a_prefix_cache_page_shows_hashes_and_a_preemption_is_marked(open_page, tmp_path):
    cached = run_session(Options(12, 4, enable_prefix_caching=True), ["alloc A 9 p", "alloc B 9 p"])
    loaded = open_page(to_html(**sources.play(cached)), fragment="#step=2", name="cache.html")
    loaded.page.hover('#blocks [data-block="0"]')
    assert re.search(r"hash\s+[0-9a-f]{8}", loaded.page.inner_text("#info"))
    loaded.check_clean()
    swapped = run_session(
        Options(5, 4, preemption_mode="swap"),
        ["alloc A 8", "alloc B 8", "alloc C 8", "free A", "resume B"],
    )
    snaps = swapped.timeline("en")
    loaded = open_page(to_html(**sources.play(swapped)), name="swap.html")
    marked = []
    for i in range(len(snaps)):
        loaded.page.evaluate(f"window.pagedsimViewer.go({i})")
        check_step(loaded, snaps[i], caption(snaps[i]), snaps[-1].step)
        if "preempted" in loaded.page.inner_text("#marks"):
            marked.append(i)
    assert marked and all(
        "swapped" in caption(snaps[i]) or "preemption" in caption(snaps[i]) for i in marked
    )
    loaded.check_clean()


def test_the_generate_page_labels_each_block_with_the_text_it_holds(open_page, tmp_path):
    from pagedsim.config import CacheConfig
    from pagedsim.engine.generate import Workload, serve

    llm, _ = serve(
        workload=Workload(["ROMEO: But soft, what light"], 6),
        cache=CacheConfig(block_size=8, num_gpu_blocks_override=8),
    )
    engine, marks = llm.llm_engine, llm.steps
    page = sources.generate(engine, marks)
    frames = page["trace_or_snapshots"]
    loaded = open_page(to_html(**page), fragment=f"#step={len(frames) - 1}")
    captions = page["options"].captions
    check_step(loaded, frames[-1], captions[-1], frames[-1].step, name=seq_name)
    assert "generated" in page["options"].captions[1] and "(slot " in page["options"].captions[1]
    texts = loaded.page.eval_on_selector_all(
        "#blocks .block .txt", "es => es.map(e => e.textContent)"
    )
    assert "ROMEO:\u00b7\u200bB" in texts  # whitespace shown, and a line may break after it
    loaded.page.click('#blocks [data-block="0"]')
    assert "ROMEO: B" in loaded.page.inner_text("#info")
    shot = shots(tmp_path) / "generate.png"
    loaded.page.screenshot(path=str(shot), full_page=True)
    check_not_blank(shot)
    loaded.check_clean()


def test_chinese_captions_in_the_page(open_page):
    page = tour_app.tour_page("zh")
    snaps = page["trace_or_snapshots"]
    loaded = open_page(to_html(**page), fragment="#step=5")
    assert loaded.dom()["caption"] == caption(snaps[5], "zh")
    assert "空闲链表" in loaded.page.inner_text("#free-head")
    loaded.check_clean()


def test_a_big_pools_tiles_gain_their_fill_and_text_in_projector_mode(open_page, tmp_path):
    """A pool over 256 blocks draws small tiles without the fill bar and text; projector mode
    adds them to every tile, drawn at once in the window and the rest when they scroll in."""
    session = run_session(Options(512, 16), long_script(60, 512, 16, seed=2))
    snaps = session.timeline("en")
    k = len(snaps) - 1
    loaded = open_page(to_html(**sources.play(session)), fragment=f"#step={k}")
    tiles = "#blocks [data-block]"
    assert loaded.page.locator(f"{tiles} .txt").count() == 0
    loaded.page.keyboard.press("p")
    assert loaded.page.locator(f"{tiles} .txt").count() == 512
    used = [b for b, c in enumerate(snaps[k].ref_counts) if c > 0]
    for b in (used[0], used[-1]):  # one in the window, one far down the page
        tile = loaded.page.locator(f'#blocks [data-block="{b}"]')
        tile.scroll_into_view_if_needed()
        want = f"{snaps[k].block_fill[b]}/16"
        loaded.page.wait_for_function(
            f"""() => document.querySelector('#blocks [data-block="{b}"] .txt')
                .textContent.startsWith('{want}')"""
        )
        width = tile.locator(".bar i").evaluate("e => e.style.width")
        assert float(width.rstrip("%")) == 100 * snaps[k].block_fill[b] / 16
    shot = shots(tmp_path) / "play-big-projector.png"
    loaded.page.screenshot(path=str(shot))
    check_not_blank(shot)
    loaded.page.keyboard.press("p")
    check_step(loaded, snaps[k], caption(snaps[k]), snaps[-1].step)
    loaded.check_clean()


NAMES_SHOWN = """() => ({
    labels: [...document.querySelectorAll('#tables [data-seq]')].map(e =>
        [e.dataset.seq, e.querySelector('.seq').textContent]),
    text: document.body.innerText,
    titles: [...document.querySelectorAll('[title]')].map(e => e.title).join(' '),
})"""
TUPLE_ID = re.compile(r"\(\d+, \d+\)")
ENGINE_NAME = re.compile(r"\br\d+\.\d+\b")


def check_names(loaded, frames, captions, shot) -> None:
    """At every step the tables, hover boxes, "changed" strip, host pane and legend say
    "r0.0", as the captions do, never the manager's tuple id "(0, 0)"."""
    named_in_both = 0
    for i, frame in enumerate(frames):
        shown = loaded.page.evaluate(NAMES_SHOWN)
        assert not TUPLE_ID.search(shown["text"] + shown["titles"]), f"step {i}: a tuple id shown"
        want = [seq_name(s.seq_id) for s in frame.sequences]
        assert shown["labels"] == [[q, q] for q in want], f"step {i}: {shown['labels']}"
        told = set(ENGINE_NAME.findall(captions[i]))
        assert told & {str(s.seq_id) for s in frame.sequences} - set(want) == set()
        named_in_both += len(told & set(want))
        owned = [b for s in frame.sequences for b in s.blocks if b >= 0]
        if owned:  # the hover box names the owners as the table does
            loaded.page.click(f'#blocks [data-block="{owned[0]}"]')
            info = loaded.page.inner_text("#info")
            assert any(q in info for q in want) and not TUPLE_ID.search(info), info
        if i == 2:
            loaded.page.screenshot(path=str(shot))
            check_not_blank(shot)
        loaded.page.keyboard.press("ArrowRight")
    assert named_in_both >= len(frames) // 2  # the captions do name the tables' sequences
    rows = loaded.page.eval_on_selector_all(
        "[data-request]", "es => es.map(e => e.dataset.request)"
    )
    assert rows and set(rows) <= {seq_name(s.seq_id) for f in frames for s in f.sequences}
    loaded.check_clean()


def test_the_generate_page_names_each_sequence_as_its_captions_do(open_page, tmp_path):
    """`pagedsim generate --max-tokens 12 --num-gpu-blocks-override 12`'s page."""
    from pagedsim.config import CacheConfig
    from pagedsim.engine.generate import Workload, serve

    llm, _ = serve(workload=Workload(max_tokens=12), cache=CacheConfig(num_gpu_blocks_override=12))
    engine, marks = llm.llm_engine, llm.steps
    page = sources.generate(engine, marks)
    frames, captions = page["trace_or_snapshots"], page["options"].captions
    assert any(isinstance(s.seq_id, tuple) for f in frames for s in f.sequences)
    loaded = open_page(to_html(**page), viewport=(1366, 768))
    check_names(loaded, frames, captions, shots(tmp_path) / "generate-names-1366.png")


def test_a_saved_generate_trace_still_names_its_sequences(open_page, tmp_path, capsys):
    """`generate --trace-out t.json`, then `pagedsim view t.json`: the same page data as
    `generate --html`, and the same names ("r0.0") at every step in Chromium."""
    from pagedsim.app import cli

    from .test_commands import page_json

    trace, live, viewed = tmp_path / "t.json", tmp_path / "live.html", tmp_path / "viewed.html"
    title = "pagedsim generate: the blocks serving a model"
    argv = ["--max-tokens", "12", "--num-gpu-blocks-override", "12", "--no-check-dense"]
    assert cli.main(["generate", *argv, "--html", str(live), "--trace-out", str(trace)]) == 0
    assert cli.main(["view", str(trace), "--html", str(viewed), "--title", title]) == 0
    capsys.readouterr()
    assert page_json(viewed) == page_json(live)
    page = sources.saved(json.loads(trace.read_text(encoding="utf-8")))
    frames = page["trace_or_snapshots"]
    loaded = open_page(viewed.read_text(encoding="utf-8"), viewport=(1366, 768))
    captions = [f.custom_caption for f in frames]
    check_names(loaded, frames, captions, shots(tmp_path) / "generate-saved-names-1366.png")
