"""A model mixing full and sliding layers runs on the hybrid allocator: one KV cache group
per kind over one pool (vLLM v1's HybridKVCacheCoordinator). The window group frees its
blocks as the window slides, the prefix cache hits across both groups, tokens equal the
dense engine's, and the blocks in use at long context match the arithmetic."""

import pytest

from pagedsim.block_table import blocks_needed
from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.engine import DenseEngine, ModelConfig, PagedEngine, Request, TinyModel

WINDOW, B = 16, 4
HYBRID = TinyModel(
    ModelConfig(layers=4, sliding_window=WINDOW, layer_types=("sliding", "full", "sliding", "full"))
)
SLIDING = TinyModel(ModelConfig(layers=2, sliding_window=WINDOW))


def serve(model, requests, blocks=200, caching=True):
    engine = PagedEngine(
        model,
        CacheConfig(block_size=B, num_gpu_blocks=blocks, enable_prefix_caching=caching),
        SchedulerConfig(max_num_batched_tokens=64, preemption_mode="recompute"),
        backend="numpy",
        check=True,
        trace=True,
    )
    states = engine.generate(requests)
    dense = DenseEngine(model).generate(requests)
    assert [s.outputs() for s in states] == [d.outputs() for d in dense]
    return engine, states


def test_at_long_context_the_window_group_holds_only_the_window():
    prompt = tuple(i % 90 + 1 for i in range(200))  # 200 tokens
    engine, _ = serve(HYBRID, [Request(prompt, 20)])
    rec = engine.log[-2]  # the last step the request is alive: L tokens hold K/V
    length = int(rec["seqs"][0].split(":")[1][:-1])  # "r0.0[start:end]": end tokens hold K/V
    assert rec["full_blocks"] == blocks_needed(length, B)
    skipped = (length - WINDOW + 1) // B  # v1: blocks the next query never reads
    assert rec["window_blocks"] == blocks_needed(length, B) - skipped
    assert rec["window_blocks"] <= -(-(WINDOW - 1) // B) + 1
    # a block of a group holds K/V of that group's layers (half of them): bytes in use
    # against one full-attention group whose blocks hold every layer
    hybrid = (rec["full_blocks"] + rec["window_blocks"]) * 2  # layers per group
    single = blocks_needed(length, B) * 4
    assert 1 - hybrid / single == pytest.approx(
        0.5 - 0.5 * rec["window_blocks"] / rec["full_blocks"]
    )
    assert 1 - hybrid / single > 0.45  # 218 tokens: 55 + 5 half-blocks vs 55 full ones


def test_every_layer_sliding_is_one_window_group_that_slides():
    engine, _ = serve(SLIDING, [Request(tuple(range(1, 61)), 30)])
    assert engine.groups == ("window",)
    peak_after_prefill = max(rec["window_blocks"] for rec in engine.log[1:-1])
    assert peak_after_prefill <= -(-(WINDOW - 1) // B) + 1  # the window and the new block
    assert sum(rec["freed"] for rec in engine.log) == sum(rec["allocated"] for rec in engine.log)
    assert engine.manager.num_free_blocks == 200  # every block back in the pool


@pytest.mark.parametrize("model", [HYBRID, SLIDING], ids=["hybrid", "sliding"])
def test_the_prefix_cache_hits_across_groups(model):
    prompt = tuple(range(1, 41))
    engine = PagedEngine(
        model,
        CacheConfig(block_size=B, num_gpu_blocks=100, enable_prefix_caching=True),
        backend="numpy",
        check=True,
    )
    first = engine.generate([Request(prompt, 6)])
    run = engine.submit(Request(prompt + (50, 51), 6))  # after the first finished
    while engine.runs:
        engine.step()
    second = [run.state]
    dense = DenseEngine(model).generate([Request(prompt, 6), Request(prompt + (50, 51), 6)])
    assert [first[0].outputs(), second[0].outputs()] == [d.outputs() for d in dense]
    hit = run.hit_tokens
    assert hit >= WINDOW and hit % B == 0  # both groups reuse the same tokens (aligned hit)
    assert engine.stats["cached_tokens"] == hit


def test_a_windowed_model_refuses_several_sequences_per_request():
    engine = PagedEngine(
        HYBRID,
        CacheConfig(block_size=B, num_gpu_blocks=50, enable_prefix_caching=False),
        backend="numpy",
    )
    with pytest.raises(ValueError, match="a model with sliding-window layers serves one"):
        engine.submit(Request((1, 2, 3), 4, n=2))
    assert engine.runs == {}


def test_the_kernels_read_both_groups_tables_null_blocks_included():
    """paged_prefill / paged_attention with the layer's window and scale, through tables
    that hold -1 for the blocks the window left behind (Numba's simulator in CI)."""
    model = TinyModel(
        ModelConfig(
            layers=2,
            heads=2,
            kv_heads=1,
            head_dim=8,
            hidden=16,
            mlp=32,
            sliding_window=5,
            layer_types=("sliding", "full"),
        )
    )
    requests = [Request(tuple(range(1, 12)), 6)]
    engine = PagedEngine(
        model,
        CacheConfig(block_size=B, num_gpu_blocks=20, enable_prefix_caching=False),
        SchedulerConfig(max_num_batched_tokens=8, preemption_mode="recompute"),
        backend="kernels",
        check=True,
    )
    states = engine.generate(requests)
    assert states[0].outputs() == DenseEngine(model).generate(requests)[0].outputs()
    assert any(rec["window_blocks"] < rec["full_blocks"] for rec in engine.log)  # it slid


def test_a_windowed_model_is_served_by_v1_which_never_swaps():
    with pytest.raises(ValueError, match="v1 preempts by recomputing only"):
        PagedEngine(
            HYBRID,
            CacheConfig(block_size=B, num_gpu_blocks=50, enable_prefix_caching=False),
            SchedulerConfig(max_num_batched_tokens=16, preemption_mode="swap"),
            backend="numpy",
        )
    with pytest.raises(ValueError, match="served by v1"):
        PagedEngine(
            SLIDING,
            CacheConfig(block_size=B, num_gpu_blocks=50, enable_prefix_caching=False),
            mode="v0",
            backend="numpy",
        )


def test_a_tight_pool_preempts_a_hybrid_request_by_recompute_and_tokens_still_match():
    model = TinyModel(ModelConfig(sliding_window=8, layer_types=("sliding", "full")))
    requests = [
        Request(tuple(range(1, 20)), 20),
        Request(tuple(range(3, 25)), 20),
        Request((5, 6, 7), 30, temperature=0.7, seed=3),
    ]
    engine = PagedEngine(
        model,
        CacheConfig(block_size=B, num_gpu_blocks=22, enable_prefix_caching=True),
        SchedulerConfig(max_num_batched_tokens=8, preemption_mode="recompute"),
        backend="numpy",
        check=True,
    )
    states = engine.generate(requests)
    assert [s.outputs() for s in states] == [
        d.outputs() for d in DenseEngine(model).generate(requests)
    ]
    stats = engine.stats
    assert stats["preempted_recompute"] > 0 and stats["preempted_swap"] == 0  # never swapped
