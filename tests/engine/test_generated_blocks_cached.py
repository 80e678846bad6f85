"""vLLM v1 caches the blocks that generated tokens fill, not only prompt blocks: a
follow-up prompt that repeats a previous prompt *and its answer* hits all of their full
blocks, and its tokens still equal the dense engine's."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.engine import DenseEngine, ModelConfig, PagedEngine, Request, TinyModel

MODEL = TinyModel(ModelConfig(layers=1, heads=2, kv_heads=1, head_dim=8, hidden=16, mlp=32))


def turn_two(prompt, answer_len, cue, block_size, caching=True):
    engine = PagedEngine(
        MODEL,
        CacheConfig(block_size=block_size, num_gpu_blocks=64, enable_prefix_caching=caching),
        SchedulerConfig(max_num_batched_tokens=32, preemption_mode="recompute"),
        backend="numpy",
        check=True,
    )
    (first,) = engine.generate([Request(prompt, answer_len)])
    follow = tuple(prompt) + tuple(first.outputs()[0]) + tuple(cue)
    second = engine.submit(Request(follow, 3))  # its Run: the prefix-cache hit it had
    while engine.runs:
        engine.step()
    return engine, first, second, follow


def test_turn_two_hits_the_blocks_of_turn_ones_prompt_and_answer():
    prompt = (1, 2, 3, 4, 5, 6)
    engine, first, second, follow = turn_two(prompt, 9, (7, 8), 4)
    # turn 1 computed K/V for its 6 prompt tokens and 8 of its 9 answer tokens: 3 full blocks
    assert second.hit_tokens == 12 > len(prompt)
    dense = DenseEngine(MODEL).generate([Request(follow, 3)])
    assert second.state.outputs() == dense[0].outputs()


def test_without_the_prefix_cache_turn_two_hits_nothing():
    _, _, second, _ = turn_two((1, 2, 3, 4, 5, 6), 9, (7, 8), 4, caching=False)
    assert second.hit_tokens == 0


@settings(max_examples=25)
@given(
    prompt=st.lists(st.integers(0, 95), min_size=1, max_size=10),
    answer=st.integers(1, 10),
    cue=st.lists(st.integers(0, 95), min_size=1, max_size=4),
    block_size=st.sampled_from([1, 2, 4, 8]),
)
def test_a_follow_up_hits_every_full_block_whose_kv_was_computed(prompt, answer, cue, block_size):
    engine, first, second, follow = turn_two(tuple(prompt), answer, tuple(cue), block_size)
    computed = len(prompt) + answer - 1  # the last answer token was sampled, never run
    cap = len(follow) - 1  # v1: the last prompt token is always computed
    assert second.hit_tokens == min(computed, cap) // block_size * block_size
    dense = DenseEngine(MODEL).generate([Request(follow, 3)])
    assert second.state.outputs() == dense[0].outputs()


@pytest.mark.parametrize("stop", [(0,), tuple(range(96))])
def test_a_stop_token_ends_a_sequence_early_on_both_engines(stop):
    request = Request((5, 6, 7), 6, n=2, temperature=1.0, seed=3, stop_token_ids=stop)
    paged = PagedEngine(
        MODEL,
        CacheConfig(block_size=2, num_gpu_blocks=16, enable_prefix_caching=False),
        backend="numpy",
        check=True,
        mode="v0",
    ).generate([request])
    dense = DenseEngine(MODEL).generate([request])
    assert paged[0].outputs() == dense[0].outputs()
    for out in paged[0].outputs():
        assert all(t not in stop for t in out[:-1]) and (len(out) == 6 or out[-1] in stop)
    if len(stop) == 96:
        assert all(len(out) == 1 for out in paged[0].outputs())
