"""The kernel's view on the page: the split-K plan is cuda_kernels' own, the ranges and
bytes follow from the shown step, and the contiguous layout's numbers from the trace."""

import re
from dataclasses import replace

import pytest

from pagedsim.app import tour as tour_app
from pagedsim.view import to_html
from pagedsim.view.kernel_view import KernelShape, kernel_story

pytestmark = pytest.mark.slow


def test_the_kernel_panel_states_cuda_kernels_plan_for_the_chosen_sequence(open_page):
    from cuda_kernels.attention import SIMULATED_CTAS_PER_SM, choose_partition, sm_count

    page = tour_app.tour_page("en")
    snaps = page["trace_or_snapshots"]
    story = kernel_story(snaps, KernelShape(kv_heads=2, head_dim=32, dtype_bytes=2))
    loaded = open_page(
        to_html(page["trace_or_snapshots"], replace(page["options"], story={"kernel": story})),
        fragment="#step=7",
    )
    k, snap = 7, snaps[7]
    counts = [s.num_tokens for s in snap.sequences]
    part = choose_partition(counts, 2, sm_count() * SIMULATED_CTAS_PER_SM)
    assert story["part"][k] == part
    for seq in snap.sequences:
        loaded.page.click(f'#tables [data-seq="{seq.seq_id}"] .seq')
        text = loaded.page.inner_text("#kernel")
        assert loaded.page.get_attribute("#kernel", "data-seq") == str(seq.seq_id)
        assert f"reads blocks {', '.join(map(str, seq.blocks))}, in this order" in text
        assert f"{part} tokens per partition" in text
        ranges = loaded.page.eval_on_selector_all(
            "#kernel [data-partition]", "es => es.map(e => e.dataset.tokens)"
        )
        want = [
            f"{lo}-{min(seq.num_tokens, lo + part) - 1}" for lo in range(0, seq.num_tokens, part)
        ]
        assert ranges == want
        per_token = 2 * 2 * 32 * 2
        last = seq.num_tokens - (len(seq.blocks) - 1) * snap.block_size
        assert f"read stops at byte {last * per_token} of {snap.block_size * per_token}" in text
        reserved = sum(story["max_tokens"][str(s.seq_id)] for s in snap.sequences)
        assert re.search(rf"\b{reserved} token slots reserved, {sum(counts)} used", text)
    loaded.check_clean()
