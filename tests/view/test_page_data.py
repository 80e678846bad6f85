"""The page's data without a browser: differences that rebuild every snapshot, a page that
names nothing outside itself, and clear errors for bad input."""

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim import palette
from pagedsim.app.play_session import Options, Refused, Session
from pagedsim.app.tour import tour_manager
from pagedsim.palette import SEQ_COLOURS as PALETTE
from pagedsim.view import PageOptions, View, page_data, to_html
from pagedsim.view.diffs import free_list_diff

from .conftest import long_script


def apply_free(old: list, d: dict) -> list:
    """viewer.js's applyFree, in Python."""
    if "a" in d:
        return list(d["a"])
    gone = set(d.get("r", ()))
    out = [b for b in old if b not in gone]
    for pos, run in d.get("i", ()):
        out[pos:pos] = run
    return out


def replay(data: dict) -> list[dict]:
    """viewer.js's apply(), in Python: the state after every step."""
    free, refs, fill, tables, order, out = [], [0] * data["nb"], [0] * data["nb"], {}, [], []
    for d in data["steps"]:
        if "fl" in d:
            free = apply_free(free, d["fl"])
        for key, into in (("r", refs), ("f", fill)):
            pairs = d.get(key, [])
            for b, v in zip(pairs[::2], pairs[1::2], strict=True):
                into[b] = v
        for q, _tokens, keep, tail in d.get("t", ()):
            if keep < 0:
                del tables[q]
            else:
                tables[q] = tables.get(q, [])[:keep] + tail
        order = d.get("q", order)
        out.append(
            dict(
                free=free,
                refs=list(refs),
                fill=list(fill),
                tables=[[data["seqs"][q], tables[q]] for q in order],
            )
        )
    return out


@given(st.permutations(range(12)), st.data())
def test_a_free_list_difference_rebuilds_the_new_list_from_the_old(old, data):
    keep = data.draw(st.lists(st.sampled_from(old), unique=True))
    kept = [b for b in old if b in keep]
    new_ids = data.draw(st.lists(st.integers(12, 30), unique=True, max_size=6))
    new = kept[:]
    for b in new_ids:
        new.insert(data.draw(st.integers(0, len(new))), b)
    if data.draw(st.booleans()):
        new = data.draw(st.permutations(new))  # kept ids reordered: the whole list is sent
    assert apply_free(list(old), free_list_diff(list(old), new)) == new


def snapshot_state(s) -> dict:
    return dict(
        free=list(s.free_list),
        refs=list(s.ref_counts),
        fill=list(s.block_fill),
        tables=[[str(q.seq_id), list(q.blocks)] for q in s.sequences],
    )


def test_replaying_the_page_data_gives_back_every_snapshot_of_a_long_run():
    session = Session(Options(256, 8))
    for c in long_script(400, 256, 8, seed=5):
        try:
            session.run(c)
        except Refused:
            pass
    snaps = session.timeline("en")
    assert replay(page_data(snaps)) == [snapshot_state(s) for s in snaps]


def test_the_page_inlines_everything_and_refers_to_nothing_outside_itself():
    html = to_html(tour_manager().trace, PageOptions(title="tour <test>"))
    assert "<title>tour &lt;test&gt;</title>" in html
    assert not re.search(
        r"""(src|href)\s*=|@import|url\((?!#)|fetch\(|XMLHttpRequest|"""
        r"""WebSocket|import\(""",
        html,
    )
    urls = set(re.findall(r"https?://[^\s\"')]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}  # a namespace name, never fetched
    assert "default-src 'none'" in html  # the browser refuses any request the page tried


def test_a_caption_cannot_close_the_script_that_holds_the_data():
    snaps = [
        s.with_caption("</script><script>alert(1)</script>") for s in tour_manager().trace.snapshots
    ]
    html = to_html(snaps)
    assert html.count("</script>") == 2  # the data's and the viewer's, nothing more
    data = html.split('id="trace-data">')[1].split("</script>")[0]
    assert json.loads(data)["steps"][0]["c"] == "</script><script>alert(1)</script>"


def test_the_page_uses_the_figures_palette():

    assert PALETTE == palette.SEQ_COLOURS


def test_the_notebook_view_is_the_page_in_an_iframe_srcdoc():
    shown = View(tour_manager().trace)._repr_html_()
    assert shown.startswith('<iframe srcdoc="&lt;!DOCTYPE html&gt;') and "<script" not in shown


def test_bad_input_is_refused_with_one_line():
    with pytest.raises(ValueError, match="nothing to show"):
        to_html([])
    with pytest.raises(TypeError, match="takes a Trace"):
        to_html([1, 2])
    with pytest.raises(ValueError, match="lang must be one of"):
        to_html(tour_manager().trace, PageOptions(lang="fr"))
    with pytest.raises(ValueError, match="12 snapshots but 1 captions"):
        to_html(tour_manager().trace, PageOptions(captions=["x"]))
    with pytest.raises(ValueError, match="not a pagedsim trace"):
        to_html({"events": []})


@pytest.mark.slow
def test_a_2000_step_trace_on_4096_blocks_fits_in_6_mb():
    session = Session(Options(4096, 16))
    for c in long_script(2000, 4096, 16, seed=0):
        try:
            session.run(c)
        except Refused:
            pass
    html = to_html(session.timeline("en"))
    assert len(session.timeline("en")) > 1500
    assert len(html.encode()) < 6_000_000


@pytest.mark.parametrize("policy", ["swap", "recompute"])
def test_a_preempted_sequence_is_told_as_preempted_not_as_finishing(policy):
    session = Session(Options(5, 4, preemption_mode=policy))
    for c in ("alloc A 8", "alloc B 8", "alloc C 8"):
        session.run(c)
    said = [s.custom_caption for s in session.timeline("en")]
    assert any("seq B is preempted" in c for c in said), said
    assert not any("seq B finishes" in c for c in said), said
    assert any("被抢占" in s.custom_caption for s in session.timeline("zh"))


def test_the_tour_badge_names_the_free_order_the_tour_runs():
    from pagedsim.view.sources import TOUR_VERSION

    order = tour_manager().pool.free_order  # the chapter's stack: the last freed is next out
    assert order == "lifo" and "LIFO" in TOUR_VERSION and "vLLM v0" in TOUR_VERSION
    assert "free queue: vLLM v1" not in TOUR_VERSION  # v1's queue is FIFO (LRU eviction)


def test_a_playground_page_names_its_manager_and_the_window_it_was_given():
    from pagedsim.view.sources import TOUR_VERSION, version_of

    assert version_of(Options()) == TOUR_VERSION
    assert version_of(Options(sliding_window=5)) == "vLLM v1 sliding window of 5 tokens"
    assert version_of(Options(sliding_window=6, hybrid=True)) == (
        "vLLM v1 hybrid allocator: full attention + a 6-token window"
    )
