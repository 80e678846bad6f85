"""The copy rows of the GPU benchmark: `copy_bandwidth`, the device-to-device copy that the
rows' pct_of_copy is measured against, and `copy_rows`: copy_blocks and write_kv, each
checked bit for bit on the device before it is timed.
"""

from __future__ import annotations  # noqa: I001  (cuda_kernels before numba)

import numpy as np

import cuda_kernels  # noqa: F401  (first: it selects the CUDA backend before numba.cuda loads)
from numba import cuda

import gpu_common as common


def copy_bandwidth(nbytes: int, runs: int, timed: bool) -> dict:
    src = cuda.to_device(np.ones(nbytes // 4, np.float32))
    dst = cuda.device_array_like(src)
    ms = common.time_ms(lambda: dst.copy_to_device(src), runs, timed)
    return {"bytes": 2 * nbytes, "median_ms": ms, "gb_per_s": 2 * nbytes / ms / 1e6 if ms else None}


def copy_rows(rng, dtype, runs, timed, copy_gbs, dry) -> list[dict]:
    """copy_blocks over many large block pairs, and write_kv of a big batch of tokens."""
    from cuda_kernels import block_copy
    from cuda_kernels.write_kv import write_kv_vec

    heads, bs, dim = (2, 4, 16) if dry else (8, 16, 128)
    num_blocks = 8 if dry else 8192  # fp16: 8192 x 64 KiB = 512 MiB
    cache = common.filled(rng, (num_blocks, 2, heads, bs, dim), dtype)
    half = num_blocks // 2
    pairs = cuda.to_device(np.stack([np.arange(half), np.arange(half) + half], 1).astype(np.int32))
    threads = 128 if timed else 16
    copy = lambda: block_copy.launch_pairs(cache, cache, pairs, half, heads)  # noqa: E731
    copy()  # checked before it is timed: the second half is now the first, bit for bit
    host = cache.copy_to_host()
    copy_ok = host[half:].tobytes() == host[:half].tobytes()
    copy_ms = common.time_ms(copy, runs, timed) if copy_ok else None
    copied = 2 * half * cache.nbytes // num_blocks  # read + write
    tokens = 16 if dry else 65536
    key = common.filled(rng, (tokens, heads, dim), dtype)
    value = common.filled(rng, (tokens, heads, dim), dtype)
    slots_host = rng.permutation(num_blocks * bs)[:tokens].astype(np.int64)
    slots = cuda.to_device(slots_host)
    write = lambda: write_kv_vec[tokens, threads](cache, key, value, slots)  # noqa: E731
    write()
    host, want_k = cache.copy_to_host(), key.copy_to_host()
    write_ok = bool(np.array_equal(host[slots_host // bs, 0, :, slots_host % bs], want_k))
    write_ms = common.time_ms(write, runs, timed) if write_ok else None
    written = 2 * 2 * key.nbytes  # K and V, read + write
    rows = []
    for name, n, ms, ok in (
        ("copy_blocks", copied, copy_ms, copy_ok),
        ("write_kv", written, write_ms, write_ok),
    ):
        gbs = n / ms / 1e6 if ms else None
        row = {"kernel": name, "dtype": dtype, "checked_on_device": ok, "bytes_moved": n}
        pct = 100 * gbs / copy_gbs if gbs and copy_gbs else None
        rows.append({**row, "median_ms": ms, "gb_per_s": gbs, "pct_of_copy": pct})
    return rows
