"""Any text is safe on the page: a trace whose captions, sequence ids, block text, hashes,
why lines, title and version carry arbitrary text (markup, `<!--`, `</script>`, U+2028,
quotes, bidi overrides, lone surrogates) gives a page that shows that text as text,
raises no page error, runs none of it and asks the outside for nothing."""

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedsim.app.tour import tour_manager
from pagedsim.io.trace_json import to_dict
from pagedsim.view import to_html
from pagedsim.view.sources import saved

HOSTILE = [
    "<!--",
    "-->",
    "</script>",
    "</SCRIPT >",
    "<script>window.__ran = 1</script>",
    '<img src=x onerror="window.__ran = 1">',
    "<svg onload=window.__ran=1>",
    "]]>",
    "\u2028",
    "\u2029",
    '"',
    "'",
    "`${window.__ran = 1}`",
    "\\",
    "\u202e",
    "\u2066",
    "\u200f",
    "\ud800",
    "\udfff",
    "\x00",
    "\x1b[31m",
    "&amp;",
    "&lt;",
    "\n\n",
    "\U0001f600",
]
texts = st.lists(st.sampled_from(HOSTILE) | st.text(max_size=12), max_size=6).map("".join)

# viewer.js's plain(): the controls that act on the text around them, shown as "<U+XXXX>"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def plain(text: str) -> str:
    return CONTROL.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def hostile_trace(words: list[str]) -> dict:
    """The tour as a saved trace whose every text field carries one of `words`."""
    data = to_dict(tour_manager().trace)
    first = data["snapshots"][1]["sequences"][0]["seq_id"]
    renamed = words[0] + "\u2063" + str(first)  # never equal to another sequence's id
    for snap in data["snapshots"]:
        snap["custom_caption"] = words[1] + f" {snap['step']}"
        for s in snap["sequences"]:
            if s["seq_id"] == first:
                s["seq_id"] = renamed
        for e in snap["events"]:
            for key in ("seq_id", "parent", "child"):
                if e.get(key) == first:
                    e[key] = renamed
    n, count = data["snapshots"][0]["num_gpu_blocks"], len(data["snapshots"])
    data["view"] = {
        "title": words[2],
        "version": words[3],
        "whys": [words[4]] * count,
        "labels": [[words[5]] * n] * count,
        "hashes": [[words[6]] * n] * count,
    }
    return data


@pytest.fixture(scope="module")
def tab(browser):
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    page = ctx.new_page()
    seen: list = []
    page.on("pageerror", lambda e: seen.append(("pageerror", str(e))))
    page.on("console", lambda m: seen.append((m.type, m.text)))
    page.on("request", lambda r: seen.append(("request", r.url)))
    yield page, seen
    ctx.close()


@pytest.mark.slow
@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(texts, min_size=7, max_size=7))
def test_any_text_in_a_trace_is_shown_as_text_and_runs_nothing(tab, tmp_path_factory, words):
    page, seen = tab
    seen.clear()
    data = hostile_trace(words)
    trace_bytes = len(json.dumps(data))
    html = to_html(**saved(json.loads(json.dumps(data))))
    assert len(html.encode()) < 2 * trace_bytes + 200_000  # no amplification
    path = tmp_path_factory.mktemp("hostile") / "page.html"
    path.write_text(html, encoding="utf-8")
    page.goto(path.as_uri() + "#step=3")
    page.wait_for_function("() => window.pagedsimViewer !== undefined", timeout=10_000)
    shown = page.evaluate("""() => ({
        ran: window.__ran,
        caption: document.querySelector('#caption').textContent,
        why: document.querySelector('#why').textContent,
        title: document.querySelector('#title').textContent,
        version: document.querySelector('#version').textContent,
        seqs: [...document.querySelectorAll('#tables [data-seq]')].map(e => e.dataset.seq),
        names: [...document.querySelectorAll('#tables .seq')].map(e => e.textContent),
        scripts: document.scripts.length,
        extra: document.querySelectorAll('img, svg:not(#arrows), iframe, object').length,
    })""")
    assert shown["ran"] is None and shown["scripts"] == 2 and shown["extra"] == 0
    assert shown["caption"] == plain(words[1] + " 3")
    assert shown["why"] == plain(words[4])
    assert shown["title"] == plain(words[2])
    assert shown["version"] == plain(words[3])
    want = [s["seq_id"] for s in data["snapshots"][3]["sequences"]]
    assert shown["seqs"] == [str(q) for q in want]
    assert shown["names"] == [plain(str(q)) for q in want]
    page.hover('#blocks [data-block="0"]')
    errors = [m for m in seen if m[0] in ("pageerror", "error", "warning")]
    elsewhere = [m for m in seen if m[0] == "request" and not m[1].startswith(path.as_uri())]
    assert errors == [] and elsewhere == [], seen
