"""Policies against the kernels: swap round trips, windowed attention, prefix-cache hits.

Tiny shapes: the CUDA simulator runs every thread as a Python thread.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

cuda_kernels = pytest.importorskip("cuda_kernels")
from helpers import random_cache  # noqa: E402

from cuda_kernels import reference  # noqa: E402
from pagedsim import KVCacheManager  # noqa: E402
from pagedsim.policies import PrefixCachingManager, SlidingWindowManager, SwapPolicy  # noqa: E402
from pagedsim.policies.preemption import Group  # noqa: E402

pytestmark = pytest.mark.kernels
H_KV, D = 2, 4  # KV heads, head dim


def gather(kv, manager, seq):
    """K/V of every token of `seq`, read through its slot mapping: [T, 2, H_kv, D]."""
    bs = manager.block_size
    slots = manager.slot_mapping(seq)
    return np.stack([kv[s // bs, :, :, s % bs, :] for s in slots])


@settings(max_examples=5)
@given(st.integers(0, 2**32 - 1), st.sampled_from([np.float32, np.float16]), st.integers(1, 9))
def test_a_swap_round_trip_restores_the_kv_bit_exactly(seed, dtype, prompt):
    rng = np.random.default_rng(seed)
    m = KVCacheManager(8, 2, trace=False)
    m.add_sequence(("g", 0), prompt)
    m.fork(("g", 0), ("g", 1))
    m.append_tokens(("g", 1), 1)
    kv = random_cache(rng, 8, H_KV, 2, D, dtype)
    for src, dst in m.drain_copies():
        kv[dst] = kv[src]
    before = {s: gather(kv, m, s) for s in m.seq_ids()}
    group = Group("g", prompt, 4, [("g", 0), ("g", 1)])
    policy = SwapPolicy(num_cpu_blocks=8)
    assert policy.preempt(m, group) == "swap"
    host = np.full((8, 2, H_KV, 2, D), np.nan, dtype)  # poisoned host pool
    out, _ = policy.drain_swaps()
    cuda_kernels.swap_out(kv, host, out)
    kv[:] = np.nan  # other sequences reuse and overwrite every GPU block meanwhile
    m.add_sequence("other", 3)  # shifts where the blocks come back
    assert policy.swap_in(m, group)
    _, back = policy.drain_swaps()
    cuda_kernels.swap_in(host, kv, back)
    for s, old in before.items():
        new = gather(kv, m, s)
        assert new.tobytes() == old.tobytes(), f"seq {s} changed after the round trip"


@settings(max_examples=4)
@given(st.integers(0, 2**32 - 1), st.integers(2, 6), st.integers(0, 3), st.integers(5, 16))
def test_windowed_kernel_over_the_managers_tables_equals_the_windowed_reference(
    seed, window, sinks, length
):
    # After a step, a table serves the *next* query (v1's remove_skipped_blocks): at position
    # n it reads its own new KV plus the W - 1 cached tokens before it, so the kernel is run
    # over the n cached tokens with window W - 1 and must find every one of them.
    rng = np.random.default_rng(seed)
    bs = 2
    m = SlidingWindowManager(24, bs, sliding_window=window, sinks=sinks, trace=False)
    m.add_sequence("a", 3)
    m.add_sequence("b", 1)
    for _ in range(length):
        m.decode_step(["a", "b"])
    kv = random_cache(rng, 24, H_KV, bs, D)
    tables = [m.block_table(s).blocks for s in ("a", "b")]
    assert NULL_IN(tables[0]) == (m.kept(m.num_tokens("a")) < len(tables[0]))
    width = max(map(len, tables))
    block_tables = np.array([t + [-1] * (width - len(t)) for t in tables], np.int32)
    lens = np.array([m.num_tokens("a"), m.num_tokens("b")], np.int32)
    query = rng.standard_normal((2, 4, D)).astype(np.float32)  # 4 query heads over 2 KV heads
    mask = cuda_kernels.ScoreMask(sliding_window=window - 1, sinks=sinks)
    got = cuda_kernels.paged_attention(query, kv, block_tables, lens, mask)
    want = reference.paged_attention(query, kv, block_tables, lens, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def NULL_IN(blocks):
    return -1 in blocks


def kv_for(tokens, pos):
    """A stand-in for a model: the K/V at `pos` depends on every token up to it."""
    rng = np.random.default_rng(abs(hash(tuple(tokens[: pos + 1]))) % 2**32)
    return rng.standard_normal((2, H_KV, D)).astype(np.float32)


def fill(kv, manager, seq, tokens, skip):
    """Write K/V of positions >= skip (the positions a prefix-cache hit did not cover)."""
    if skip >= len(tokens):
        return
    k_v = np.stack([kv_for(tokens, pos) for pos in range(skip, len(tokens))])  # [T, 2, H_kv, D]
    key, value = k_v[:, 0].copy(), k_v[:, 1].copy()  # [T, H_kv, D] each
    cuda_kernels.write_kv(
        kv, key, value, manager.slot_mapping(seq)[skip : len(tokens)]
    )  # one launch


def assert_same_attention(rng, cached, fresh, seq, length):
    """Decode attention of `seq` over (kv, manager) `cached` equals it over `fresh`, bit for bit."""
    query = rng.standard_normal((1, 2, D)).astype(np.float32)
    lens = np.array([length], np.int32)
    a, b = (
        cuda_kernels.paged_attention(
            query, kv, np.array([m.block_table(seq).blocks], np.int32), lens
        )
        for kv, m in (cached, fresh)
    )
    assert np.isfinite(a).all()
    np.testing.assert_array_equal(a, b)


@settings(max_examples=3)
@given(st.integers(0, 2**32 - 1), st.integers(0, 5))
def test_a_prefix_cache_hit_gives_the_same_attention_as_recomputing(seed, tail):
    rng = np.random.default_rng(seed)
    bs = 2
    shared = [int(t) for t in rng.integers(0, 50, 6)]
    first, second = shared + [1, 2], shared + [int(t) for t in rng.integers(0, 50, tail + 1)]
    cached = PrefixCachingManager(12, bs, trace=False)
    kv = np.full((12, 2, H_KV, bs, D), np.nan, np.float32)  # unwritten slots are NaN
    cached.add_sequence("first", len(first), tokens=first)
    fill(kv, cached, "first", first, 0)
    cached.free_sequence("first")  # its prompt blocks stay cached on the free list
    cached.add_sequence("second", len(second), tokens=second)
    hits = cached.stats.hits
    assert hits == len(shared) // bs  # the three shared blocks come back
    fill(kv, cached, "second", second, hits * bs)  # only the rest is computed

    fresh = KVCacheManager(12, bs, trace=False)
    kv2 = np.full_like(kv, np.nan)
    fresh.add_sequence("second", len(second))
    fill(kv2, fresh, "second", second, 0)  # everything recomputed

    assert_same_attention(rng, (kv, cached), (kv2, fresh), "second", len(second))


@settings(max_examples=3)
@given(st.integers(0, 2**32 - 1))
def test_a_hit_on_blocks_filled_by_generated_tokens_gives_the_same_attention(seed):
    rng = np.random.default_rng(seed)
    bs = 2
    prompt, answer = ([int(t) for t in rng.integers(0, 50, k)] for k in (3, 4))
    m = PrefixCachingManager(12, bs, trace=False)
    kv = np.full((12, 2, H_KV, bs, D), np.nan, np.float32)  # unwritten slots are NaN
    m.add_sequence("turn1", 3, tokens=prompt)
    m.append_tokens("turn1", 3, token_ids=answer[:3])  # the last sampled token never gets KV
    fill(kv, m, "turn1", prompt + answer[:3], 0)
    m.free_sequence("turn1")
    second = prompt + answer + [int(rng.integers(0, 50))]  # the next turn: history + message
    m.add_sequence("turn2", len(second), tokens=second)
    assert m.stats.hit_tokens == 6  # blocks [p p] [p a] [a a]: two of them hold generated KV
    fill(kv, m, "turn2", second, 6)

    fresh = KVCacheManager(12, bs, trace=False)
    kv2 = np.full_like(kv, np.nan)
    fresh.add_sequence("turn2", len(second))
    fill(kv2, fresh, "turn2", second, 0)
    assert_same_attention(rng, (kv, m), (kv2, fresh), "turn2", len(second))
