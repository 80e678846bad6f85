"""A vLLM KV event stream's page in a real Chromium: at every step the tiles show what the
page's data says the cache holds, the step's blocks are outlined, the hover box names
vLLM's hash, parent chain and token ids, and hostile text from the stream stays text."""

import json
from pathlib import Path

import pytest

from pagedsim import kv_events as ke
from pagedsim import kv_stream as ks
from pagedsim.view import page_html
from pagedsim.view import stream as stream_page
from tests.view.stream_state import on_tiles, page_json, tiles

pytest.importorskip("msgspec", reason="the events extra: pip install -e .[events]")

RECORDING = Path(__file__).parent / "data" / "vllm_stream.kvcap"

EVERY_STEP = """() => {
    const out = [];
    for (let i = 0; i < window.pagedsimViewer.count(); i++) {
        window.pagedsimViewer.go(i);
        out.push({
            cached: [...document.querySelectorAll('#blocks .block.cached')].map(
                e => [+e.dataset.block, e.querySelector('.badge').textContent]),
            touched: [...document.querySelectorAll('#blocks .block.touched')].map(
                e => +e.dataset.block).sort((a, b) => a - b),
            kv: document.querySelector('#kv').textContent,
        });
    }
    return out;
}"""


def test_every_step_of_the_recorded_stream_shows_its_cached_blocks(open_page):
    html = page_html(stream_page.page_data(ks.batches_of_capture(RECORDING.read_bytes())))
    data = page_json(html)
    loaded = open_page(html)
    shown = loaded.page.evaluate(EVERY_STEP)
    states = tiles(data)
    assert len(shown) == len(data["steps"]) == 88
    for i, (dom, step) in enumerate(zip(shown, data["steps"], strict=True)):
        assert {b: h for b, h in dom["cached"]} == states[i] == on_tiles(data, step["n"]), i
        assert dom["touched"] == sorted(set(step.get("e", ()))), i
        if i:
            assert dom["kv"].startswith(step["kv"]["t"])
            assert f"seq {step['kv']['seq']}" in dom["kv"]
    loaded.check_clean()
    assert (
        loaded.page.evaluate("getComputedStyle(document.querySelector('#free-list')).display")
        == "none"
    )


def test_the_hover_box_names_vllms_hash_parent_chain_and_token_ids(open_page):
    html = page_html(stream_page.page_data(ks.batches_of_capture(RECORDING.read_bytes())))
    data = page_json(html)
    k = next(i for i, s in enumerate(data["steps"]) if s.get("kv", {}).get("parent"))
    loaded = open_page(html, fragment=f"#step={k}")
    slot = data["steps"][k]["k"][0]
    rec = next(r for r in data["stream"]["recs"] if r["slot"] == slot and r["from"] == k)
    loaded.page.hover(f'#blocks [data-block="{slot}"]')
    text = loaded.page.inner_text("#info")
    assert rec["h"] in text and rec["s"] in text and json.dumps(rec["tok"]).replace(" ", "") in text
    assert data["steps"][k]["kv"]["parent"] in text.split("parent chain")[1]
    assert "ref count" not in text
    loaded.check_clean()


@pytest.mark.parametrize("name", ["<!-- x", "</script><b>y</b>", "a\u2028b\u2029c", "\"'&<>"])
def test_hostile_lora_names_stay_text(open_page, name):
    stored = ke.BlockStored([1 << 63], None, [1, 2], 2, lora_id=1, lora_name=name, medium="CPU")
    data = stream_page.page_data([ke.Batch([stored], seq=0, ts=1.0)])
    loaded = open_page(page_html(data), fragment="#step=1")
    assert loaded.page.evaluate("window.pagedsimViewer.count()") == 2
    assert f"lora_name {name}" in loaded.page.text_content("#kv")
    loaded.page.hover('#blocks [data-block="0"]')
    assert name in loaded.page.text_content("#info") and "CPU" in loaded.page.text_content("#info")
    assert loaded.page.evaluate("document.querySelectorAll('#info b, #kv b').length") == 0
    loaded.check_clean()


def test_a_live_page_reloads_itself_and_follows_the_newest_event(open_page):
    batches = ks.batches_of_capture(RECORDING.read_bytes())
    html = page_html(stream_page.page_data(batches, live=30))
    assert '<meta http-equiv="refresh" content="30">' in html
    loaded = open_page(html, fragment="#follow")
    last = loaded.page.evaluate("window.pagedsimViewer.count()") - 1
    assert loaded.page.evaluate("window.pagedsimViewer.index()") == last == 87
    assert loaded.page.evaluate("location.hash") == "#follow"  # the next reload follows too
    loaded.page.keyboard.press("ArrowLeft")  # stepping back stops following
    assert loaded.page.evaluate("location.hash") == f"#step={last - 1}"
    assert "refresh" not in page_html(stream_page.page_data(batches))
    loaded.check_clean()


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080), (3840, 2160)])
@pytest.mark.parametrize("mode", ["", "&present"])
def test_a_stream_page_has_its_legend_and_fitted_tiles_in_both_modes(open_page, size, mode):
    """A stream page hides the left column (no tables), so its legend sits under the tiles;
    presentation mode fits the 16 tiles to the screen as squares, as it does a tour's."""
    html = page_html(stream_page.page_data(ks.batches_of_capture(RECORDING.read_bytes())))
    loaded = open_page(html, fragment="#step=2" + mode, viewport=size)
    page = loaded.page
    legend = page.evaluate(
        """() => { const e = document.querySelector('#legend'), r = e.getBoundingClientRect();
                   return {shown: e.offsetParent !== null && r.bottom <= innerHeight,
                           looks: [...e.children].map((li) => li.dataset.look)}; }"""
    )
    assert legend == {"shown": True, "looks": ["cached", "free", "touched"]}, legend
    tiles = page.evaluate(
        """() => [...document.querySelectorAll('#blocks .block')].map((e) => {
                   const r = e.getBoundingClientRect(); return [r.width, r.height]; })"""
    )
    assert len(tiles) == 16
    if mode:
        area = sum(w * h for w, h in tiles) / (size[0] * size[1])
        assert all(0.8 <= w / h <= 1.25 for w, h in tiles), tiles[:2]
        assert area >= 0.25, area  # the tiles fill the screen, not a strip of it
    loaded.check_clean()
