"""The device checks of the GPU benchmark against the float64 reference, NaN-poisoned
outputs: `check_correctness` (every launcher) and `check_config` (the very kernel a decode
row is about to time). A configuration that fails is never timed.
"""

from __future__ import annotations  # noqa: I001  (cuda_kernels before numba)

import numpy as np

import cuda_kernels as ck  # first: it selects the CUDA backend before numba.cuda is imported
from cuda_kernels import attention, reference
from cuda_kernels.labs import contiguous
from cuda_kernels.labs.layouts import NHD_SCALAR
from numba import cuda

import gpu_common as common


def check_correctness(rng, dim: int, dry: bool) -> dict:
    """Every launcher on device inputs, compared with the float64 reference."""
    attention.POISON["on"] = True
    bs = 16
    # G = 4 either way (float16 "auto" takes the tensor cores); sequence 2 spans two blocks
    # (copy_blocks and swap move them); the window leaves out the middle of every sequence
    # longer than sinks + window, and its attended tokens take two partitions
    heads, kv_heads = (4, 1) if dry else (8, 2)
    lens = np.array([1, 16, 20] if dry else [1, 37, 300, 16], np.int32)
    window, sinks, window_part = (6, 2, 4) if dry else (50, 4, 32)
    tables, num_blocks = reference.scattered_block_tables(rng, lens, bs, spare=4)
    results = {}
    for dtype, tol in ((np.float32, 1e-5), (np.float16, 2e-3)):
        name = np.dtype(dtype).name
        cache = np.full((num_blocks, 2, kv_heads, bs, dim), np.nan, dtype)
        slots = np.concatenate(
            [tables[i, p // bs] * bs + p % bs for i, n in enumerate(lens) for p in [np.arange(n)]]
        )
        key = rng.standard_normal((len(slots), kv_heads, dim)).astype(dtype)
        value = rng.standard_normal((len(slots), kv_heads, dim)).astype(dtype)
        d_cache = cuda.to_device(cache)
        ck.write_kv(d_cache, cuda.to_device(key), cuda.to_device(value), cuda.to_device(slots))
        host = d_cache.copy_to_host()
        results[f"write_kv[{name}]"] = bool(
            np.array_equal(host[slots // bs, 0, :, slots % bs], key)
        )
        query = rng.standard_normal((len(lens), heads, dim)).astype(dtype)
        want = reference.paged_attention(query, host, tables, lens)
        d_args = (cuda.to_device(query), d_cache, cuda.to_device(tables), cuda.to_device(lens))
        for mode, part in (("single", None), ("split", 64), ("split", 7)):
            out = ck.paged_attention(*d_args, mode=mode, partition_size=part).copy_to_host()
            results[f"paged_attention[{name},{mode},P={part}]"] = common.close(out, want, tol)
        mask = ck.ScoreMask(sliding_window=window, sinks=sinks)
        win = ck.paged_attention(*d_args, mask, mode="split", partition_size=window_part)
        results[f"paged_attention[{name},window]"] = common.close(
            win.copy_to_host(), reference.paged_attention(query, host, tables, lens, mask), tol
        )
        k_pool = cuda.to_device(np.ascontiguousarray(host[:, 0].transpose(0, 2, 1, 3)))
        v_pool = cuda.to_device(np.ascontiguousarray(host[:, 1].transpose(0, 2, 1, 3)))
        shape = ck.CacheShape(num_blocks, kv_heads, bs, dim)
        split = ck.DecodeOptions(mode="split", partition_size=64)
        nhd = ck.decode_with(NHD_SCALAR, k_pool, v_pool, query, tables, lens, shape, split)
        results[f"factory[split-NHD,{name}]"] = common.close(nhd, want, tol)
        spare = sorted(set(range(num_blocks)) - set(tables.ravel().tolist()))  # unused blocks
        ck.copy_blocks(d_cache, [(int(tables[2, 0]), spare[0])])
        results[f"copy_blocks[{name}]"] = bool(
            np.array_equal(d_cache.copy_to_host()[spare[0]], host[tables[2, 0]], equal_nan=True)
        )
        pool = np.zeros((3,) + cache.shape[1:], dtype)
        ck.swap_out(d_cache, pool, [(int(tables[2, 1]), 1)])
        ck.swap_in(pool, d_cache, [(1, spare[1])])
        results[f"swap[{name}]"] = bool(
            d_cache.copy_to_host()[spare[1]].tobytes() == host[tables[2, 1]].tobytes()
        )
    attention.POISON["on"] = None
    return results


def check_config(rng, case, dim, mode, layout, dry, path="cuda_core") -> bool:
    """The very kernel a decode row of `case` (batch, context, heads, kv_heads, dtype) times
    (same G, dtype, head_dim, block size or contiguous row length, launcher and mode) on a
    few short sequences, on the device, against the float64 reference."""
    _, context, heads, kv_heads, dtype = case
    bs = 16
    lens = np.array([3, 17] if dry else [37, 300, 1], np.int32)  # dry: split-K over 2 parts
    tables, num_blocks = reference.scattered_block_tables(rng, lens, bs, spare=2)
    host = rng.standard_normal((num_blocks, 2, kv_heads, bs, dim)).astype(dtype)
    query = rng.standard_normal((len(lens), heads, dim)).astype(dtype)
    want = reference.paged_attention(query, host, tables, lens)
    attention.POISON["on"] = True
    if layout == "contiguous":
        flat = contiguous.contiguous_cache(host, tables, lens, max(context, int(lens.max())))
        cache, table = flat, np.zeros((len(lens), 1), np.int32)
        loaders, block = contiguous.CONTIGUOUS, flat.shape[3]
    else:
        cache, table, loaders, block = host, tables, ck.BLOCK_MAJOR, bs
    d_cache = cuda.to_device(cache)
    on_device = (cuda.to_device(a) for a in (query, table, lens))
    case = common.DecodeCase(loaders, d_cache, d_cache, *on_device, block, kv_heads)
    part = 16 if dry else 64
    launch, out = common.decode_launch(
        case, mode=mode, part=part, paged=layout == "paged", path=path
    )
    launch()
    attention.POISON["on"] = None
    return common.close(out.copy_to_host(), want, 1e-5 if dtype == "float32" else 2e-3)
