"""Block copies end to end: copy-on-write after a fork, and swapping to a host pool."""

import numpy as np
from conftest import random_cache, random_query, rel_err
from hypothesis import given, settings
from hypothesis import strategies as st

import cuda_kernels as ck
from cuda_kernels import reference
from pagedsim import KVCacheManager


def test_copy_blocks_copies_k_and_v_of_every_head_and_nothing_else():
    rng = np.random.default_rng(1)
    cache = random_cache(rng, 6, 2, 4, 8)
    want = cache.copy()
    ck.copy_blocks(cache, [(1, 4), (3, 0)])
    want[4], want[0] = want[1], want[3]
    assert np.array_equal(cache, want)


@settings(max_examples=10)
@given(
    prompt=st.integers(1, 10),
    parent_steps=st.integers(1, 6),
    child_steps=st.integers(1, 6),
    seed=st.integers(0, 2**31),
)
def test_after_a_fork_and_divergent_appends_each_sequence_attends_to_exactly_its_own_tokens(
    prompt, parent_steps, child_steps, seed
):
    rng = np.random.default_rng(seed)
    heads, dim, bs = 2, 8, 4
    mgr = KVCacheManager(16, bs, trace=False)
    cache = np.full((16, 2, heads, bs, dim), np.nan, np.float32)  # [N, 2, H_kv, B, D]
    tokens = {0: []}  # what each sequence has written, in order: (key, value)

    def write(seq, slots):
        k = rng.standard_normal((len(slots), heads, dim)).astype(np.float32)
        v = rng.standard_normal((len(slots), heads, dim)).astype(np.float32)
        ck.copy_blocks(cache, mgr.drain_copies())  # copy-on-write before the write lands
        ck.write_kv(cache, k, v, np.asarray(slots))
        tokens[seq] += list(zip(k, v, strict=True))

    write(0, mgr.add_sequence(0, prompt))
    mgr.fork(0, 1)
    tokens[1] = list(tokens[0])
    for _ in range(max(parent_steps, child_steps)):  # interleaved decode steps
        for seq, steps in ((0, parent_steps), (1, child_steps)):
            if len(tokens[seq]) < prompt + steps:
                write(seq, mgr.append_tokens(seq, 1))
    tables = np.full((2, 8), -7, np.int32)
    for s in (0, 1):
        blocks = mgr.block_table(s).blocks
        tables[s, : len(blocks)] = blocks
    lens = np.array([len(tokens[0]), len(tokens[1])], np.int32)
    query = random_query(rng, 2, heads, dim)
    out = ck.paged_attention(query, cache, tables, lens)
    for s in (0, 1):
        keys = np.array([k for k, _ in tokens[s]])
        values = np.array([v for _, v in tokens[s]])
        assert rel_err(out[s], reference.dense_attention(query[s], keys, values)) < 1e-5


@settings(max_examples=10)
@given(
    pairs=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 7)),
        max_size=4,
        unique_by=(lambda p: p[0], lambda p: p[1]),
    ),
    fp16=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_swapping_blocks_out_and_back_in_is_bit_exact(pairs, fp16, seed):
    rng = np.random.default_rng(seed)
    dtype = np.float16 if fp16 else np.float32
    cache = random_cache(rng, 6, 2, 4, 8, dtype)
    original = cache.copy()
    host = np.full((8,) + cache.shape[1:], np.nan, dtype)
    ck.swap_out(cache, host, pairs)
    for src, dst in pairs:
        assert host[dst].tobytes() == original[src].tobytes()
    cache[:] = 0
    ck.swap_in(host, cache, [(dst, src) for src, dst in pairs])
    for src, _ in pairs:
        assert cache[src].tobytes() == original[src].tobytes()


def test_swap_works_on_a_device_cache_left_on_the_device():
    from numba import cuda

    rng = np.random.default_rng(2)
    cache = random_cache(rng, 4, 1, 4, 8)
    dev = cuda.to_device(cache)
    host = np.zeros_like(cache)
    ck.swap_out(dev, host, [(2, 0)])
    ck.swap_in(host, dev, [(0, 3)])
    assert np.array_equal(dev.copy_to_host()[3], cache[2])


def test_kernels_use_a_per_layer_view_of_the_whole_model_pool_in_place():
    from numba import cuda

    rng = np.random.default_rng(3)
    pool = rng.standard_normal((6, 3, 2, 2, 4, 8)).astype(np.float32)  # [N, L, 2, H_kv, B, D]
    layer = 1
    key = rng.standard_normal((2, 2, 8)).astype(np.float32)
    value = rng.standard_normal((2, 2, 8)).astype(np.float32)
    for where in ("host", "device"):
        start = pool.copy()
        target = pool if where == "host" else cuda.to_device(pool)
        view = target[:, layer]
        assert not view.is_c_contiguous() if where == "device" else not view.flags.c_contiguous
        ck.write_kv(view, key, value, np.array([5, 22]))
        ck.copy_blocks(view, [(1, 3)])
        result = pool if where == "host" else target.copy_to_host()
        want = start.copy()
        want[1, layer, 0, :, 1], want[1, layer, 1, :, 1] = key[0], value[0]
        want[5, layer, 0, :, 2], want[5, layer, 1, :, 2] = key[1], value[1]
        want[3, layer] = want[1, layer]
        assert np.array_equal(result, want), where  # other layers untouched
        tables = np.array([[1, 3, 0, 2]], np.int32)
        query = rng.standard_normal((1, 4, 8)).astype(np.float32)
        out = ck.paged_attention(query, view, tables, np.array([13], np.int32))
        want_out = reference.paged_attention(query, want[:, layer], tables, [13])
        assert rel_err(out, want_out) < 1e-5


def random_bits(rng, shape, dtype):
    """Arbitrary bit patterns (NaN payloads, infinities, subnormals): a copy must keep every bit."""
    raw = rng.integers(0, 256, int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def poisoned_pool(rng, shape, dtype, blocks):
    """A cache of random bits with `blocks` (the destinations) filled with NaN first."""
    cache = random_bits(rng, shape, dtype)
    cache[list(blocks)] = np.nan
    return cache


@settings(max_examples=8, deadline=None)
@given(
    fp16=st.booleans(),
    heads=st.integers(1, 3),
    block_size=st.sampled_from([1, 4, 16]),
    head_dim=st.sampled_from([3, 8, 24, 64]),
    seed=st.integers(0, 2**31),
)
def test_copy_blocks_is_bit_exact_on_the_vector_and_the_scalar_path(
    fp16, heads, block_size, head_dim, seed
):
    from numba import cuda

    from cuda_kernels.block_copy import vector_chunks

    rng = np.random.default_rng(seed)
    dtype = np.float16 if fp16 else np.float32
    pairs = [(0, 5), (2, 3), (4, 1)]
    cache = poisoned_pool(rng, (6, 2, heads, block_size, head_dim), dtype, [5, 3, 1])
    want = cache.copy()
    for src, dst in pairs:
        want[dst] = want[src]
    dev = cuda.to_device(cache)
    block_bytes = 2 * heads * block_size * head_dim * np.dtype(dtype).itemsize
    assert (vector_chunks(dev, dev) > 0) == (block_bytes % 16 == 0)  # which path runs
    ck.copy_blocks(dev, pairs)
    assert dev.copy_to_host().tobytes() == want.tobytes()


def test_the_vector_copy_falls_back_to_scalar_for_a_pool_not_16_byte_aligned():
    from cuda_kernels.block_copy import vector_chunks

    raw = np.zeros(2 * 2 * 1 * 4 * 8 * 4 + 32, np.uint8)
    skip = (4 - raw.ctypes.data) % 16
    misaligned = raw[skip : skip + 512].view(np.float32).reshape(2, 2, 1, 4, 8)
    assert misaligned.ctypes.data % 16 == 4  # 4 bytes past a 16-byte boundary
    aligned = np.zeros((2, 2, 1, 4, 8), np.float32)
    assert vector_chunks(aligned, aligned) == 2 * 4 * 8 * 4 // 16
    assert vector_chunks(misaligned, aligned) == 0 and vector_chunks(aligned, misaligned) == 0
    want = misaligned.copy()
    want[1] = want[0]
    ck.copy_blocks(misaligned, [(0, 1)])  # the scalar path still copies
    assert misaligned.tobytes() == want.tobytes()


@settings(max_examples=8, deadline=None)
@given(
    fp16=st.booleans(),
    heads=st.integers(1, 3),
    head_dim=st.sampled_from([3, 8, 16, 40]),
    tokens=st.integers(1, 5),
    seed=st.integers(0, 2**31),
)
def test_write_kv_is_bit_exact_on_the_vector_and_the_scalar_path(
    fp16, heads, head_dim, tokens, seed
):
    from cuda_kernels.write_kv import use_vector_path

    rng = np.random.default_rng(seed)
    dtype = np.float16 if fp16 else np.float32
    block_size, num_blocks = 4, 3
    slots = rng.choice(num_blocks * block_size, tokens, replace=False)
    slots[rng.random(tokens) < 0.2] = -1  # padding tokens write nothing
    cache = np.full((num_blocks, 2, heads, block_size, head_dim), np.nan, dtype)
    key = random_bits(rng, (tokens, heads, head_dim), dtype)
    value = random_bits(rng, (tokens, heads, head_dim), dtype)
    want = cache.copy()
    for t, slot in enumerate(slots):
        if slot >= 0:
            want[slot // block_size, 0, :, slot % block_size] = key[t]
            want[slot // block_size, 1, :, slot % block_size] = value[t]
    assert use_vector_path(cache, key, value) == (head_dim * np.dtype(dtype).itemsize % 16 == 0)
    ck.write_kv(cache, key, value, slots)
    assert cache.tobytes() == want.tobytes()
