"""Any text is safe on the page: a trace whose captions, sequence ids, block text, hashes,
why lines, title and version carry arbitrary text (markup, `<!--`, `</script>`, U+2028,
quotes, bidi overrides, lone surrogates) gives a page that shows that text as text,
raises no page error, runs none of it and asks the outside for nothing."""

import json
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pagedsim import kv_events as ke
from pagedsim.app.play_session import Options, Session
from pagedsim.app.tour import tour_manager
from pagedsim.io.trace_json import to_dict
from pagedsim.view import page_html, sources, to_html
from pagedsim.view import stream as stream_page
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
# names that are JavaScript object keys (a Map or an object lookup by name would find these)
# and characters that mean something in a CSS selector or an HTML attribute
KEYS = ["__proto__", "constructor", "toString", "hasOwnProperty", "valueOf", "0", "-1", "1e3"]
SELECTOR = ['"]', "'", "[data-seq]", "\\", "#x", ".a", "a b", "*", ":hover", "</", "${"]
# every class of text: arbitrary code points, lone surrogates (category Cs), bidi and other
# invisible controls, C0/C1 controls with NUL, JS keys, selector syntax, and a long run
text_piece = (
    st.sampled_from(HOSTILE + KEYS + SELECTOR)
    | st.text(max_size=12)
    | st.text(st.characters(categories=["Cs", "Cc", "Cf", "Zl", "Zp"]), max_size=6)
    | st.integers(1_000, 60_000).map(lambda n: "\u202e<!--x" * (n // 8))
)
texts = st.lists(text_piece, max_size=6).map("".join)

# viewer.js's plain(): the controls that act on the text around them, shown as "<U+XXXX>"
CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u180e\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u2069\ufeff\ufff9-\ufffb]"
)


def js(text: str) -> str:
    """The text as a JS string holds it: UTF-16, so two surrogates in a row are the one
    character they encode (JSON's own "\\ud800\\udc00"), and a lone one stays."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def plain(text: str) -> str:
    return CONTROL.sub(lambda m: f"<U+{ord(m.group()):04X}>", js(text))


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
        "story": {  # the hover box's detail, the timeline and the host pane name it too
            "details": [words[6]] * count,
            "timeline": [[renamed, 1, [2], -1]],
            "host": [[[renamed, 2]]] * count,
        },
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
@example(["\u202e<!--", "</script>\u2028", "\ud800", "\u2060", "\x00", "]]>", "\u202e"])
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
        timeline: [...document.querySelectorAll('#timeline .tl-name')].map(e => e.textContent),
        tips: [...document.querySelectorAll('.tl-run, .tl-pre')].map(e => e.title),
        host: [...document.querySelectorAll('#host [data-host-seq]')].map(e => e.dataset.hostSeq),
        hostText: [...document.querySelectorAll('#host [data-host-seq]')].map(e => e.textContent),
        kernel: document.querySelector('#kernel').dataset.seq,
        kernelSegs: [...document.querySelectorAll('#kernel [data-kseq]')].map(e => e.dataset.kseq),
        kernelQuery: document.querySelector('#kernel .kquery').textContent,
        scripts: document.scripts.length,
        extra: document.querySelectorAll('img, svg:not(#arrows), iframe, object').length,
    })""")
    assert shown["ran"] is None and shown["scripts"] == 2 and shown["extra"] == 0
    assert shown["caption"] == plain(words[1] + " 3")
    assert shown["why"] == plain(words[4])
    assert shown["title"] == plain(words[2])
    assert shown["version"] == plain(words[3])
    want = [s["seq_id"] for s in data["snapshots"][3]["sequences"]]
    assert shown["seqs"] == [js(str(q)) for q in want]
    assert shown["names"] == [plain(str(q)) for q in want]
    # the kernel's view names the sequences as text too: its chosen one and its bars
    chosen = [q for q in want if js(str(q)) == shown["kernel"]]
    assert len(chosen) == 1 and shown["kernelSegs"] == [js(str(q)) for q in want]
    assert shown["kernelQuery"].startswith("the query of " + plain(str(chosen[0])) + " (token ")
    renamed = data["view"]["story"]["timeline"][0][0]
    assert shown["timeline"] == [plain(renamed)] and shown["host"] == [js(renamed)] * 2
    assert shown["tips"] == [plain(renamed) + ": running", plain(renamed) + " preempted @ 2"]
    assert shown["hostText"] == [plain(renamed) + f":{j}" for j in range(2)]
    page.hover("#caption")
    if words[6]:
        assert page.text_content("#info") == "engine" + plain(words[6])
    page.hover('#blocks [data-block="0"]')
    errors = [m for m in seen if m[0] in ("pageerror", "error", "warning")]
    elsewhere = [m for m in seen if m[0] == "request" and not m[1].startswith(path.as_uri())]
    assert errors == [] and elsewhere == [], seen


def load(page, tmp_path_factory, html: str, fragment: str) -> None:
    path = tmp_path_factory.mktemp("hostile") / "page.html"
    path.write_text(html, encoding="utf-8")
    page.goto(path.as_uri() + fragment)
    page.wait_for_function("() => window.pagedsimViewer !== undefined", timeout=10_000)


def clean(seen: list) -> None:
    errors = [m for m in seen if m[0] in ("pageerror", "error", "warning", "request")]
    assert errors == [] or all(m[0] == "request" and m[1].startswith("file:") for m in errors), seen


@pytest.mark.slow
@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(texts, min_size=3, max_size=3), st.lists(texts, min_size=1, max_size=3))
def test_any_text_in_a_vllm_stream_is_shown_as_text(tab, tmp_path_factory, words, hashes):
    """lora_name, medium and string block hashes are what a vLLM stream carries as text: the
    event panel (#kv), the caption and the hover box show them as text, bidi controls named.
    (#kv once showed them raw: a U+202E in a lora_name reversed the rest of the panel.)"""
    page, seen = tab
    seen.clear()
    medium, lora_name = (words[1] or "m")[:64], words[0][: ke.MAX_TEXT]  # longer: refused
    hashes = list(dict.fromkeys(h[:256] for h in hashes if h)) or ["h"]
    line = {
        "ts": 1.5,
        "events": [
            {
                "type": "BlockStored",
                "block_hashes": hashes,
                "parent_block_hash": None,
                "token_ids": [7] * len(hashes),
                "block_size": 1,
                "lora_id": 1,
                "medium": medium,
                "lora_name": lora_name,
            }
        ],
    }
    batches = ke.read_batches([json.dumps(line)])  # as `pagedsim view` reads a stream file
    load(
        page, tmp_path_factory, page_html(stream_page.page_data(batches, title=words[2])), "#step=1"
    )
    kv = page.text_content("#kv")
    assert f"lora_name {plain(lora_name)}" in kv and f"medium {plain(medium)}" in kv
    assert page.text_content("#title") == plain(words[2])
    assert page.evaluate("window.__ran") is None and page.evaluate("document.scripts.length") == 2
    page.hover('#blocks [data-block="0"]')
    info = page.text_content("#info")
    assert plain(hashes[0]) in info and plain(lora_name) in info and plain(medium) in info
    clean(seen)


word = texts.map(lambda t: "".join(t.split())).filter(lambda w: w and not w.startswith("#"))


@pytest.mark.slow
@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(word, min_size=3, max_size=3, unique=True))
def test_any_word_in_a_play_script_is_shown_as_text(tab, tmp_path_factory, names):
    """Sequence names typed into `play` (every operation, swap preemption: the host pane)
    reach the tables, the captions, the host pane and the hover box as text."""
    page, seen = tab
    seen.clear()
    a, b, c = names
    session = Session(Options(num_gpu_blocks=6, preemption_mode="swap"))
    for command in [f"alloc {a} 4", f"alloc {b} 9", f"fork {a} {c}", f"append {c} 2", "evict"]:
        session.run(command)
    snaps, made = session.timeline(), sources.play(session)
    host = {q for q, n in made["options"].story["host"][-1] if n}  # evict swapped one out
    load(page, tmp_path_factory, to_html(**made), f"#step={len(snaps) - 1}")
    shown = page.evaluate("""() => ({
        seqs: [...document.querySelectorAll('#tables [data-seq]')].map(e => e.dataset.seq),
        names: [...document.querySelectorAll('#tables .seq')].map(e => e.textContent),
        host: [...document.querySelectorAll('#host [data-host-seq]')].map(e => e.dataset.hostSeq),
        caption: document.querySelector('#caption').textContent,
    })""")
    live = [str(s.seq_id) for s in snaps[-1].sequences]
    assert shown["seqs"] == [js(q) for q in live] and shown["names"] == [plain(q) for q in live]
    assert (
        host
        and set(shown["host"]) == {js(q) for q in host}
        and shown["caption"] == plain(snaps[-1].custom_caption)
    )
    page.hover('#blocks [data-block="0"]')
    assert page.evaluate("window.__ran") is None and page.evaluate("document.scripts.length") == 2
    clean(seen)


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_text_keeps_the_pool_on_screen(tab, tmp_path_factory, stream):
    """A 4,000-character version label (or lora_name) once filled a 1366x768 window: the
    header took the screen and the pool's tiles sat under the key footer, out of reach."""
    page, seen = tab
    seen.clear()
    long = "\u202e<!--x" * 700
    if stream:
        stored = ke.BlockStored([1], None, [0], 1, lora_id=1, lora_name=long, medium=long[:64])
        html = page_html(stream_page.page_data([ke.Batch([stored], ts=1.0)], title=long))
    else:
        html = to_html(**saved(json.loads(json.dumps(hostile_trace([""] * 2 + [long] * 5)))))
    load(page, tmp_path_factory, html, "#step=1")
    top = page.evaluate(
        "document.querySelector('#blocks [data-block=\"0\"]').getBoundingClientRect().top"
    )
    assert top < 768 / 2
    page.hover('#blocks [data-block="0"]', timeout=5_000)
    assert page.evaluate("document.querySelector('#info').hidden") is False
    clean(seen)


@pytest.mark.slow
def test_the_generate_pages_token_text_is_shown_as_text(tab, tmp_path_factory):
    """The shipped model's tokenizer turns what it does not know into "<unk>": token text
    with markup in it, on the tiles, in the hover box and in the captions."""
    from pagedsim.config import CacheConfig
    from pagedsim.engine.generate import Workload, serve

    prompt = "</script><!--\u202e]]>\u2028<script>window.__ran=1</script>\x00 to be"
    llm, _ = serve(
        workload=Workload(prompts=[prompt], max_tokens=4),
        cache=CacheConfig(block_size=4, num_gpu_blocks_override=16),
    )
    made = sources.generate(llm.llm_engine, llm.steps)
    labels = made["options"].labels
    page, seen = tab
    seen.clear()
    load(page, tmp_path_factory, to_html(**made), f"#step={len(labels) - 1}")
    tiles = page.evaluate("[...document.querySelectorAll('#blocks .txt')].map(e => e.textContent)")
    assert "<unk>" in "".join(labels[-1]) and "<unk>" in "".join(tiles)
    assert page.evaluate("document.querySelectorAll('unk, #blocks script').length") == 0
    page.hover("#caption")
    assert page.text_content("#info").startswith("engine")
    page.hover('#blocks [data-block="0"]')
    assert "<unk>" in page.text_content("#info")
    assert page.evaluate("window.__ran") is None and page.evaluate("document.scripts.length") == 2
    clean(seen)


def test_invisible_characters_are_named(tab, tmp_path_factory):
    """Zero-width and invisible format characters made two names look the same ("A" and
    "A" + U+2060): they are shown by code point, as the bidi controls are."""
    page, seen = tab
    seen.clear()
    hidden = "\u200b\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\ufff9\ufffa\ufffb"
    data = hostile_trace(["A" + hidden, "", "T" + hidden] + [""] * 4)
    load(page, tmp_path_factory, to_html(**saved(data)), "#step=3")
    shown = "".join(f"<U+{ord(c):04X}>" for c in hidden)
    assert page.text_content("#title") == "T" + shown
    assert page.text_content("#tables .seq").startswith("A" + shown)
    clean(seen)


JS_NAMES = {"A": "__proto__", "B": "constructor", "B2": "toString", "C": "hasOwnProperty", "D": "0"}


def test_sequences_named_like_javascripts_own_keys_are_ordinary(tab, tmp_path_factory):
    """The page looks sequences up by index and in Maps, and the kernel's view looks up each
    one's longest length by name: "__proto__", "constructor" and "toString" are names like
    any other there (an object lookup would find Object.prototype's)."""
    data = to_dict(tour_manager().trace)
    for snap in data["snapshots"]:
        for s in snap["sequences"]:
            s["seq_id"] = JS_NAMES[s["seq_id"]]
        for e in snap["events"]:
            for key in ("seq_id", "parent", "child"):
                if key in e:
                    e[key] = JS_NAMES[e[key]]
    made = saved(data)  # the kernel's view is on by default
    longest: dict = {}
    for snap in data["snapshots"]:
        for s in snap["sequences"]:
            longest[s["seq_id"]] = max(longest.get(s["seq_id"], 0), s["num_tokens"])
    page, seen = tab
    seen.clear()
    last = len(data["snapshots"]) - 1
    load(page, tmp_path_factory, to_html(**made), f"#step={last}")
    live = [s["seq_id"] for s in data["snapshots"][last]["sequences"]]
    assert (
        page.evaluate(
            "[...document.querySelectorAll('#tables [data-seq]')].map(e => e.dataset.seq)"
        )
        == live
    )
    reserved = 0
    for q in live:
        reserved += longest[q]
        page.click(f'#tables [data-seq="{q}"] .seq')
        assert page.get_attribute("#kernel", "data-seq") == q
    assert page.get_attribute('#kernel [data-layout="contiguous"]', "data-reserved") == str(
        reserved
    )
    clean(seen)
