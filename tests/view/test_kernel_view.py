"""The kernel's view on every trace page, read back from the DOM and compared with the
simulator's snapshot: the chosen sequence's table row, the order the kernel reads its
blocks, the split-K partitions (cuda_kernels' own choose_partition, computed here again
from the snapshot), the bytes read per block and where the last block's read stops, and
contiguous (each live sequence at its longest length) beside paged slots."""

import json
import random
import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedsim.app import tour as tour_app
from pagedsim.app.play_session import Options, Refused, Session
from pagedsim.view import page_data, sources, to_html

pytestmark = pytest.mark.slow

READ_BACK = """() => {
  const k = document.querySelector('#kernel'), d = (e) => ({...e.dataset});
  const one = (sel) => d(k.querySelector(sel));
  return {
    seq: k.dataset.seq, hidden: k.hidden,
    cells: [...k.querySelectorAll('.kcell')].map(d),
    stops: [...k.querySelectorAll('.kcell')].map(e => !!e.querySelector('.kstop')),
    parts: [...k.querySelectorAll('.kplan [data-partition]')].map(d),
    contiguous: one('[data-layout="contiguous"]'), paged: one('[data-layout="paged"]'),
    groups: [...k.querySelectorAll('.kgroups [data-group]')].map(d),
    segs: [...k.querySelectorAll('[data-kseq]')].map((e) => e.dataset.kseq),
    text: k.textContent,
  };
}"""


def expected_plan(snap, kv_heads=1, head_dim=64, dtype=np.float16, heads=1, counts=None) -> int:
    """cuda_kernels' partition size for this snapshot's lengths (or `counts`: the tokens each
    sequence's launch reads), for the launch's CTAs per sequence (KV heads x the cuda-core
    kernel's head chunks) on the SMs it assumes."""
    from cuda_kernels.attention import SIMULATED_CTAS_PER_SM, choose_partition, sm_count
    from cuda_kernels.fast.decode_geometry import geometry

    warps = 1  # the simulator's launch (cuda_kernels.attention.launch_warps)
    chunks = geometry(head_dim, heads // kv_heads, dtype, warps)["chunks"]
    counts = [s.num_tokens for s in snap.sequences] if counts is None else counts
    if not counts:
        return 0
    return choose_partition(counts, kv_heads * chunks, sm_count() * SIMULATED_CTAS_PER_SM)


def choose(page, seq: str) -> dict:
    """Click `seq`'s name in the tables and read the kernel's view back."""
    # a click on the name (a big page's far rows are not rendered: the event is sent)
    page.eval_on_selector(f'#tables [data-seq="{seq}"] .seq', "e => e.click()")
    # a big page (over 256 blocks) draws the panel only while it is on screen
    page.evaluate("document.querySelector('#kernel').scrollIntoView()")
    page.wait_for_function(
        "q => document.querySelector('#kernel').dataset.seq === q"
        " && document.querySelector('#kernel .kgrid') !== null",
        arg=seq,
    )
    return page.evaluate(READ_BACK)


def check_step(page, snaps, i: int, per_token: int) -> int:
    """Go to step i, choose each live sequence in turn and compare the panel with the
    snapshot; returns the most partitions seen."""
    page.evaluate(f"window.pagedsimViewer.go({i})")
    snap, bs = snaps[i], snaps[i].block_size
    longest: dict = {}
    for s in (s for sn in snaps for s in sn.sequences):
        longest[s.seq_id] = max(longest.get(s.seq_id, 0), s.num_tokens)
    part = expected_plan(snap)
    most = 0
    held = {b for s in snap.sequences for b in s.blocks if b >= 0}
    for seq in snap.sequences:
        got = choose(page, str(seq.seq_id))
        n, blocks = seq.num_tokens, list(seq.blocks)
        assert got["seq"] == str(seq.seq_id) and not got["hidden"]
        order = iter(range(len(blocks)))
        want_cells = []
        for j, b in enumerate(blocks):
            lo, hi = j * bs, min(n, (j + 1) * bs) - 1
            want_cells.append(
                {
                    "logical": str(j),
                    "phys": str(b),
                    "order": str(next(order)) if b >= 0 else "",
                    "partition": str(lo // part),
                    "tokens": f"{lo}-{hi}",
                    "read": f"{lo}-{hi}" if b >= 0 else "",
                    "bytes": str((hi - lo + 1) * per_token if b >= 0 else 0),
                }
            )
        assert got["cells"] == want_cells, (i, seq)
        last = n - (len(blocks) - 1) * bs
        assert got["stops"] == [False] * (len(blocks) - 1) + [last < bs]
        assert f"the read stops at byte {last * per_token} of {bs * per_token}" in got["text"]
        want_parts = [
            {
                "partition": str(p),
                "tokens": f"{lo}-{min(n, lo + part) - 1}",
                "blocks": ",".join(
                    str(b) for b in blocks[lo // bs : (min(n, lo + part) - 1) // bs + 1] if b >= 0
                ),
            }
            for p, lo in enumerate(range(0, n, part))
        ]
        assert got["parts"] == want_parts, (i, seq, part)
        most = max(most, len(want_parts))
        reserved = sum(longest[s.seq_id] for s in snap.sequences)
        used = sum(s.num_tokens for s in snap.sequences)
        stored = sum(snap.block_fill[b] for b in held)
        assert got["contiguous"] == {
            "layout": "contiguous",
            "sequences": str(len(snap.sequences)),
            "reserved": str(reserved),
            "used": str(used),
            "wasted": str(reserved - used),
        }
        assert got["paged"] == {
            "layout": "paged",
            "blocks": str(len(held)),
            "slots": str(len(held) * bs),
            "stored": str(stored),
            "unfilled": str(len(held) * bs - stored),
        }
    if not snap.sequences:
        assert "(no sequences)" in page.text_content("#kernel")
    return most


def in_chromium(examples: int):
    """Hypothesis settings for a test that drives the browser: few examples, no deadline."""
    return settings(
        max_examples=examples,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        deadline=None,
    )


def load(open_page, html: str):
    loaded = open_page(html, fragment="#step=0")
    loaded.page.wait_for_function("() => window.pagedsimViewer !== undefined")
    return loaded


@in_chromium(4)
@given(st.randoms(use_true_random=False))
def test_the_tour_pages_kernel_view_is_the_snapshots(open_page, rnd):
    page = tour_app.tour_page("en")
    snaps = page["trace_or_snapshots"]
    loaded = load(open_page, to_html(**page))
    for i in rnd.sample(range(len(snaps)), 4):
        check_step(loaded.page, snaps, i, per_token=2 * 1 * 64 * 2)
    loaded.check_clean()


def long_play(seed: int, options: Options | None = None) -> Session:
    """A playground on 512 blocks of 16 with prompts long enough for split-K (`options`: its
    pool; one without fork, the hybrid allocator's, appends instead)."""
    options = options or Options(512, 16)
    rng, session, live = random.Random(seed), Session(options), []
    for k in range(14):
        roll = rng.random()
        if not live or roll < 0.35:
            c = f"alloc s{k} {rng.randint(200, 1500)}"
        elif roll < 0.7 or (roll < 0.85 and options.hybrid):
            c = f"append {rng.choice(live)} {rng.randint(1, 40)}"
        elif roll < 0.85:
            c = f"fork {rng.choice(live)} s{k}"
        else:
            c = f"free {live.pop(rng.randrange(len(live)))}"
        try:
            session.run(c)
        except Refused:
            continue
        if c.startswith(("alloc", "fork")):
            live.append(f"s{k}")
    return session


@in_chromium(4)
@given(st.integers(0, 2**16), st.randoms(use_true_random=False))
def test_a_play_pages_kernel_view_is_the_snapshots_split_k_included(open_page, seed, rnd):
    page = sources.play(long_play(seed))
    snaps = page["trace_or_snapshots"]
    loaded = load(open_page, to_html(**page))
    most = max(
        check_step(loaded.page, snaps, i, per_token=2 * 1 * 64 * 2)
        for i in sorted({len(snaps) - 1, *rnd.sample(range(len(snaps)), min(3, len(snaps)))})
    )
    # a prompt of 200+ tokens on 264 CTA slots is cut into partitions
    assert most > 1 or not any(s.num_tokens > 256 for s in snaps[-1].sequences)
    loaded.check_clean()


def test_the_choice_is_kept_across_steps_and_presentation_mode_hides_it_behind_k(open_page):
    page = tour_app.tour_page("en")
    loaded = load(open_page, to_html(**page))
    p = loaded.page
    p.evaluate("window.pagedsimViewer.go(7)")  # B2 appends: the panel follows it
    assert p.get_attribute("#kernel", "data-seq") == "B2"
    p.evaluate("window.pagedsimViewer.go(6)")
    p.click('#tables [data-seq="B"] .seq')
    p.keyboard.press("ArrowRight")
    assert p.get_attribute("#kernel", "data-seq") == "B"
    assert p.is_visible("#kernel")
    p.keyboard.press("p")
    assert not p.is_visible("#kernel")
    p.keyboard.press("k")
    assert p.is_visible("#kernel")
    p.keyboard.press("k")
    assert not p.is_visible("#kernel")
    loaded.check_clean()


PANEL = """() => { const k = document.querySelector('#kernel');
  return {html: k.outerHTML, seq: k.dataset.seq,
          phys: [...k.querySelectorAll('.kcell')].map((e) => e.dataset.phys).join(',')}; }"""
TAG = "() => document.querySelectorAll('#kernel *').forEach((e) => { e.kept = true; })"
# every cell but the last, whose fill grew: it is drawn again
KEPT = "() => [...document.querySelectorAll('#kernel .kcell')].slice(0, -1).every((e) => e.kept)"


def walk(open_page, html: str, n: int, rnd) -> int:
    """Every next step, then jumps; at a few steps the panel must be the one a page opened
    there draws (for the same sequence). Returns how many steps kept the panel's cells."""
    walked = load(open_page, html).page
    checked, kept = set(rnd.sample(range(n), min(3, n))), 0
    for i in [*range(n), *rnd.sample(range(n), min(4, n))]:
        before = walked.evaluate(PANEL)
        walked.evaluate(TAG)
        walked.evaluate(f"window.pagedsimViewer.go({i})")
        after = walked.evaluate(PANEL)
        if (after["seq"], after["phys"]) == (before["seq"], before["phys"]) and after["phys"]:
            assert walked.evaluate(KEPT), i
            kept += 1
        if i in checked:
            checked.discard(i)
            fresh = open_page(html, name=f"fresh{i}.html", fragment=f"#step={i}").page
            if fresh.evaluate(PANEL)["seq"] != after["seq"]:  # a step that wrote no table keeps
                fresh.eval_on_selector(  # the walk's sequence: choose it by its name
                    f'#tables [data-seq="{after["seq"]}"] .seq', "e => e.click()"
                )
            assert fresh.evaluate(PANEL) == after, i
    return kept


def test_stepping_through_the_tour_patches_the_panel_and_keeps_its_cells(open_page):
    """A step that only fills slots of the chosen sequence's blocks keeps the panel's other
    cells (a rebuild restyled and laid out ~600 elements per step); the panel is the one that
    opening the step draws."""
    page = tour_app.tour_page("en")
    n = len(page["trace_or_snapshots"])
    assert walk(open_page, to_html(**page), n, random.Random(n)) >= 2  # tour steps 3 and 7


@in_chromium(1)
@given(st.integers(0, 2**16), st.randoms(use_true_random=False))
def test_stepping_through_a_play_page_draws_what_opening_each_step_does(open_page, seed, rnd):
    page = sources.play(long_play(seed, Options(256, 16)))  # not big: the panel is always drawn
    walk(open_page, to_html(**page), len(page["trace_or_snapshots"]), rnd)


def test_a_generate_page_uses_the_served_models_shape_and_keeps_it_in_its_trace():
    from pagedsim.config import CacheConfig
    from pagedsim.engine.generate import Workload, serve
    from pagedsim.view.kernel_view import launch_plan, shape_of

    llm, _ = serve(
        workload=Workload(["ROMEO: But soft", "JULIET: O Romeo"], 6),
        cache=CacheConfig(block_size=4, num_gpu_blocks_override=16),
        check_dense=False,
    )
    c = llm.llm_engine.model.config
    page = sources.generate(llm.llm_engine, llm.steps)
    data = page_data(**page)
    k = data["kernel"]
    assert k["shape"] == [c.kv_heads, c.head_dim, 4, c.heads, c.layers] and not k["assumed"]
    assert k["bytesPerToken"] == 2 * c.kv_heads * c.head_dim * 4
    assert k["ctas"] == launch_plan(shape_of(c))[0] >= c.kv_heads
    again = page_data(**sources.saved(sources.trace_out(page)))
    assert again["kernel"] == k  # `view T.json` of its --trace-out shows the same numbers
    tour = page_data(**tour_app.tour_page("en"))["kernel"]
    assert tour["assumed"] and tour["shape"] == [1, 64, 2, 1, 1]


def test_no_kernel_view_without_sequences_or_when_turned_off(tmp_path):
    import json

    from pagedsim.io.trace_json import to_dict
    from pagedsim.view.command import main

    page = tour_app.tour_page("en")
    assert "kernel" not in page_data(**sources.events(page["trace_or_snapshots"][:1]))
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(to_dict(tour_app.tour_manager().trace)), encoding="utf-8")
    for flags, has in (([], True), (["--no-kernel"], False)):
        main([str(trace), "--html", str(tmp_path / "p.html"), *flags])
        assert ('"kernel":{' in (tmp_path / "p.html").read_text(encoding="utf-8")) is has


# ---- a hybrid page: one sequence, two KV cache groups, two launches -----------------------

WINDOW = 300


def check_hybrid_step(page, snaps, i: int, per_token: int) -> int:
    """Go to step i, choose each group of each live sequence and compare the panel with an
    independent count: one length per sequence in each launch (not one per group), the
    window group reading its last WINDOW tokens; returns the most partitions seen."""
    page.evaluate(f"window.pagedsimViewer.go({i})")
    snap, bs = snaps[i], snaps[i].block_size
    bases = list(dict.fromkeys(s.seq_id.rsplit(":", 1)[0] for s in snap.sequences))
    length = {s.seq_id.rsplit(":", 1)[0]: s.num_tokens for s in snap.sequences}
    assert len(snap.sequences) == 2 * len(bases)  # the trace holds both groups of each

    def read_from(s) -> int:
        """The first position s's layers read: 0, or its window's oldest still held."""
        if not s.seq_id.endswith(":window"):
            return 0
        lead = next((j for j, b in enumerate(s.blocks) if b >= 0), len(s.blocks))
        return max(s.num_tokens - min(WINDOW, s.num_tokens), min(s.num_tokens, lead * bs))

    reads = {  # each launch reads one length per sequence (not one per group)
        "full": [length[q] for q in bases],
        "window": [
            s.num_tokens - read_from(s) for s in snap.sequences if s.seq_id.endswith(":window")
        ],
    }
    plan = {group: expected_plan(snap, counts=counts) for group, counts in reads.items()}
    longest: dict = {}
    for s in (s for sn in snaps for s in sn.sequences):
        longest[s.seq_id] = max(longest.get(s.seq_id, 0), s.num_tokens)
    most = 0
    for seq in snap.sequences:
        base, group = seq.seq_id.rsplit(":", 1)
        got = choose(page, seq.seq_id)
        n, blocks, part = seq.num_tokens, list(seq.blocks), plan[group]
        start = read_from(seq)
        assert start <= n - min(WINDOW, n) + 1  # at most the oldest, freed for the next query
        assert all(b >= 0 for b in blocks[start // bs :]), (i, seq)  # what it reads is held
        order = iter(range(len(blocks)))
        want_cells = []
        for j, b in enumerate(blocks):
            lo, hi = j * bs, min(n, (j + 1) * bs) - 1
            on, first = b >= 0 and max(lo, start) <= hi, max(lo, start)
            want_cells.append(
                {
                    "logical": str(j),
                    "phys": str(b),
                    "order": str(next(order)) if on else "",
                    "partition": str((first - start) // part),
                    "tokens": f"{lo}-{hi}",
                    "read": f"{first}-{hi}" if on else "",
                    "bytes": str((hi - first + 1) * per_token if on else 0),
                }
            )
        assert got["cells"] == want_cells, (i, seq)
        want_parts = [
            {
                "partition": str(p),
                "tokens": f"{lo}-{min(n, lo + part) - 1}",
                "blocks": ",".join(
                    str(b) for b in blocks[lo // bs : (min(n, lo + part) - 1) // bs + 1] if b >= 0
                ),
            }
            for p, lo in enumerate(range(start, n, part))
        ]
        assert got["parts"] == want_parts, (i, seq, part)
        most = max(most, len(want_parts))
        mine = [s for s in snap.sequences if s.seq_id.rsplit(":", 1)[0] == base]
        assert got["groups"] == [
            {
                "group": s.seq_id.rsplit(":", 1)[1],
                "read": f"{a}-{s.num_tokens - 1}",
                "blocks": ",".join(
                    str(b)
                    for j, b in enumerate(s.blocks)
                    if b >= 0 and max(j * bs, a) <= min(s.num_tokens, (j + 1) * bs) - 1
                ),
            }
            for s in mine
            for a in [read_from(s)]
        ]
        held = {b for s in snap.sequences for b in s.blocks if b >= 0}
        # contiguous: each sequence once, reserved at its longest in each of its 2 groups
        reserved = sum(2 * longest[f"{q}:full"] for q in bases)
        used = sum(2 * length[q] for q in bases)
        assert got["contiguous"] == {
            "layout": "contiguous",
            "sequences": str(len(bases)),
            "reserved": str(reserved),
            "used": str(used),
            "wasted": str(reserved - used),
        }
        assert got["segs"] == bases
        stored = sum(snap.block_fill[b] for b in held)
        assert got["paged"]["blocks"] == str(len(held)) and got["paged"]["stored"] == str(stored)
    return most


@in_chromium(3)
@given(st.integers(0, 2**16), st.randoms(use_true_random=False))
def test_a_hybrid_pages_kernel_view_counts_sequences_and_says_what_each_group_reads(
    open_page, seed, rnd
):
    page = sources.play(long_play(seed, Options(512, 16, sliding_window=WINDOW, hybrid=True)))
    snaps = page["trace_or_snapshots"]
    loaded = load(open_page, to_html(**page))
    picks = sorted({len(snaps) - 1, *rnd.sample(range(1, len(snaps)), min(2, len(snaps) - 1))})
    most = max(check_hybrid_step(loaded.page, snaps, i, per_token=2 * 1 * 64 * 2) for i in picks)
    assert most > 1 or not any(s.num_tokens > 256 for s in snaps[-1].sequences)
    again = page_data(**sources.saved(sources.trace_out(page)))["kernel"]
    assert again == page_data(**page)["kernel"]  # `view T.json` of its --trace-out: the same
    loaded.check_clean()


# ---- the page's language --------------------------------------------------------------------

# English words of the panel's templates; identifiers (choose_partition, head_dim, K/V, CTA,
# SMALL_DECODE, float16, cuda_core) and the word "token" stay as they are in Chinese text
ENGLISH = re.compile(
    r"\b(the|of|partitions?|tokens|blocks?|bytes|slots?|contiguous|paged|paging|query|read|"
    r"reserved|used|wasted|layers?|kernel's|view|decode|assumed|logical|physical)\b"
)
IDENTIFIERS = re.compile(
    r"cuda_kernels\.attention\.choose_partition|SMALL_DECODE|head_dim|cuda_core"
)
TEXTS = """() => { const k = document.querySelector('#kernel');
  return k.textContent + ' ' + [...k.querySelectorAll('[title]')].map((e) => e.title).join(' ');
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_kernel_view_and_its_key_speak_the_pages_language(open_page, lang):
    page = tour_app.tour_page(lang)
    snaps = page["trace_or_snapshots"]
    loaded = load(open_page, to_html(**page))
    p = loaded.page
    for i in (3, 7, len(snaps) - 1):
        p.evaluate(f"window.pagedsimViewer.go({i})")
        text = IDENTIFIERS.sub(" ", p.evaluate(TEXTS))
        if lang == "zh":
            assert not ENGLISH.search(text), (i, ENGLISH.search(text), text)
            assert "分区" in text and "连续分配" in text, text
        else:
            assert "partition" in text and "contiguous" in text, text
    p.keyboard.press("p")  # presentation mode: the key help shows with the chrome
    p.mouse.move(300, 300)
    p.mouse.move(400, 400)
    keys = p.inner_text("#keys")
    assert ("K 内核视角" if lang == "zh" else "K kernel's view") in keys, keys
    loaded.check_clean()


def test_a_page_without_the_kernels_view_names_no_k_key(open_page):
    page = tour_app.tour_page("en")
    page["options"] = replace(page["options"], story={"kernel": False})
    loaded = load(open_page, to_html(**page))
    assert "K kernel" not in loaded.page.text_content("#keys")
    loaded.check_clean()


def test_every_kernel_view_template_has_its_chinese_with_the_same_fields():
    """viewer.js fills the panel's templates by their English (`kw("...")`); each has its
    Chinese in kernel_view.toml, with the same {fields}, and the table has no stale one."""
    from importlib.resources import files

    from pagedsim.view.kernel_view import ZH

    js = files("pagedsim.view").joinpath("viewer.js").read_text(encoding="utf-8")
    used = {json.loads(f'"{m}"') for m in re.findall(r'kw\("((?:[^"\\]|\\.)*)"', js)}
    python = {"this GPU's {sms} SMs x {per} CTAs", "the simulator's assumed {sms} SMs x {per} CTAs"}
    assert used | python == set(ZH), (used | python) ^ set(ZH)
    for en, zh in ZH.items():
        assert set(re.findall(r"\{(\w+)\}", en)) == set(re.findall(r"\{(\w+)\}", zh)), en
