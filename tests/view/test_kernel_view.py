"""The kernel's view on every trace page, read back from the DOM and compared with the
simulator's snapshot: the chosen sequence's table row, the order the kernel reads its
blocks, the split-K partitions (cuda_kernels' own choose_partition, computed here again
from the snapshot), the bytes read per block and where the last block's read stops, and
contiguous (each live sequence at its longest length) beside paged slots."""

import random

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
    text: k.textContent,
  };
}"""


def expected_plan(snap, kv_heads=1, head_dim=64, dtype=np.float16, heads=1) -> int:
    """cuda_kernels' partition size for this snapshot's lengths, for the launch's CTAs per
    sequence (KV heads x the cuda-core kernel's head chunks) on the SMs it assumes."""
    from cuda_kernels.attention import SIMULATED_CTAS_PER_SM, choose_partition, sm_count
    from cuda_kernels.fast.decode_geometry import geometry

    warps = 1  # the simulator's launch (cuda_kernels.attention.launch_warps)
    chunks = geometry(head_dim, heads // kv_heads, dtype, warps)["chunks"]
    counts = [s.num_tokens for s in snap.sequences]
    if not counts:
        return 0
    return choose_partition(counts, kv_heads * chunks, sm_count() * SIMULATED_CTAS_PER_SM)


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
        # a click on the name (a big page's far rows are not rendered: the event is sent)
        page.eval_on_selector(f'#tables [data-seq="{seq.seq_id}"] .seq', "e => e.click()")
        # a big page (over 256 blocks) draws the panel only while it is on screen
        page.evaluate("document.querySelector('#kernel').scrollIntoView()")
        page.wait_for_function(
            "q => document.querySelector('#kernel').dataset.seq === q"
            " && document.querySelector('#kernel .kgrid') !== null",
            arg=str(seq.seq_id),
        )
        got = page.evaluate(READ_BACK)
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


def load(open_page, html: str):
    loaded = open_page(html, fragment="#step=0")
    loaded.page.wait_for_function("() => window.pagedsimViewer !== undefined")
    return loaded


@settings(
    max_examples=4,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    deadline=None,
)
@given(st.randoms(use_true_random=False))
def test_the_tour_pages_kernel_view_is_the_snapshots(open_page, rnd):
    page = tour_app.tour_page("en")
    snaps = page["trace_or_snapshots"]
    loaded = load(open_page, to_html(**page))
    for i in rnd.sample(range(len(snaps)), 4):
        check_step(loaded.page, snaps, i, per_token=2 * 1 * 64 * 2)
    loaded.check_clean()


def long_play(seed: int) -> Session:
    """A playground on 512 blocks of 16 with prompts long enough for split-K."""
    rng, session, live = random.Random(seed), Session(Options(512, 16)), []
    for k in range(14):
        roll = rng.random()
        if not live or roll < 0.35:
            c = f"alloc s{k} {rng.randint(200, 1500)}"
        elif roll < 0.7:
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


@settings(
    max_examples=4,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    deadline=None,
)
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
