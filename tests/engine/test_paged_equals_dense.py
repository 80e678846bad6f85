"""The paged engine generates exactly what the dense engine generates: random request
mixes (prompt and output lengths, n, beam width, shared prefixes), pool sizes that force
preemption, token budgets that chunk prompts, swap or recompute, prefix cache on or off.

Most examples read K/V with the NumPy references through the block tables (fast); the
kernel examples run write_kv, paged_prefill, paged_attention, copy_blocks and
swap_out/swap_in under the simulator on a smaller model.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.block_table import blocks_needed
from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.engine import DenseEngine, ModelConfig, PagedEngine, Request, TinyModel

SMALL = TinyModel(ModelConfig(layers=1, heads=2, kv_heads=1, head_dim=8, hidden=16, mlp=32))
DEFAULT = TinyModel(ModelConfig())
LOGIT_TOL = 1e-4  # float32 rounding through the layers; logits are O(10)


@st.composite
def mixes(draw, max_requests=4, max_prompt=12):
    """(requests, block_size, num_gpu_blocks, budget, policy, prefix_caching)."""
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    prefix = tuple(draw(st.lists(st.integers(0, 95), min_size=0, max_size=8)))
    requests = []
    for _ in range(draw(st.integers(1, max_requests))):
        own = tuple(draw(st.lists(st.integers(0, 95), min_size=1, max_size=max_prompt)))
        prompt = (prefix + own if draw(st.booleans()) else own)[: max_prompt + 8]
        if requests and draw(st.integers(0, 3)) == 0:
            prompt = requests[-1].prompt  # an exact repeat: a full hit, capped at the last token
        kind = draw(st.sampled_from(["greedy", "sampled", "parallel", "beam"]))
        requests.append(
            Request(
                prompt,
                draw(st.integers(1, 4)),
                n=draw(st.integers(2, 3)) if kind == "parallel" else 1,
                beam_width=draw(st.integers(1, 3)) if kind == "beam" else 0,
                temperature=0.0 if kind in ("greedy", "beam") else 0.9,
                seed=draw(st.integers(0, 99)),
            )
        )
    worst = max(r.width * blocks_needed(len(r.prompt) + r.max_tokens, block_size) for r in requests)
    num_gpu_blocks = worst + draw(st.integers(0, 6))  # tight pools preempt
    budget = max(r.width for r in requests) + draw(st.integers(0, 8))  # small budgets chunk
    return (
        requests,
        block_size,
        num_gpu_blocks,
        budget,
        draw(st.sampled_from(["recompute", "swap"])),
        draw(st.booleans()),
    )


def assert_same(model, mix, backend):
    requests, block_size, num_gpu_blocks, budget, policy, caching = mix
    # v1 serves what vLLM v1's scheduler serves; beams, n > 1 and swapping are v0's
    v1 = policy == "recompute" and all(r.width == 1 and not r.beam_width for r in requests)
    engine = PagedEngine(
        model,
        CacheConfig(
            block_size=block_size, num_gpu_blocks=num_gpu_blocks, enable_prefix_caching=caching
        ),
        SchedulerConfig(max_num_batched_tokens=budget, preemption_mode=policy),
        mode="v1" if v1 else "v0",
        backend=backend,
        check=True,
    )
    paged = engine.generate(requests, keep_logits=True)
    dense = DenseEngine(model).generate(requests)
    for d, p in zip(dense, paged, strict=True):
        assert p.outputs() == d.outputs()
        assert set(p.logits) == set(d.logits)
        for key, row in d.logits.items():
            np.testing.assert_allclose(p.logits[key], row, rtol=0, atol=LOGIT_TOL)
    assert engine.manager.num_free_blocks == num_gpu_blocks, "every block came back"
    return engine


@settings(max_examples=60)
@given(mix=mixes())
def test_paged_engine_equals_dense_engine_on_random_mixes_through_block_tables(mix):
    assert_same(DEFAULT, mix, "numpy")


@settings(max_examples=5)
@given(mix=mixes(max_requests=3, max_prompt=6))
def test_paged_engine_on_the_kernels_equals_dense_engine(mix):
    assert_same(SMALL, mix, "kernels")


@pytest.mark.parametrize("policy", ["recompute", "swap"])
def test_a_tight_pool_with_beams_preempts_on_the_kernels_and_still_matches(policy):
    prefix = (1, 2, 3, 4)
    requests = [
        Request(prefix + (5, 6), 3, beam_width=2),
        Request(prefix + (7,), 3, n=2, temperature=0.9),
        Request(prefix + (5, 6), 2),
        Request((9, 8, 7, 6, 5), 3),
    ]
    engine = assert_same(SMALL, (requests, 2, 10, 6, policy, True), "kernels")
    stats = engine.stats
    assert stats["cow_bytes"] > 0 and stats["cached_tokens"] > 0
    assert stats[f"preempted_{policy}"] > 0
