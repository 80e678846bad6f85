"""Host launcher for paged decode attention: validation, mode choice, grids.

`paged_attention` reads the chapter's per-layer cache; `decode_with` is the same
launcher for any layout whose address functions are given as `layout.Loaders`
(issue 7 builds its variants through it).

Mode rule for mode="auto" (`choose_mode`): split-K when the longest attended context
spans at least two partitions (longest >= 2 * partition_size) AND the single-pass grid,
num_seqs * num_kv_heads thread blocks, is smaller than 2 x the number of SMs, so it
cannot keep the GPU busy. Otherwise single pass (no partial buffers, no second
kernel). Partition size defaults to 512 tokens. The SM count is read from the device
(132 assumed under the simulator, an H100/H200).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from . import _backend
from . import _checks as ck
from .decode import make_decode_kernel
from .layout import BLOCK_MAJOR, Loaders, check_kv_cache
from .merge import merge_partitions

DEFAULT_PARTITION = 512  # tokens per split-K partition (vLLM's v2 uses 512)
SIMULATED_SMS = 132
MODES = ("auto", "single", "split")
# Fill output and partial buffers with NaN before launch, so that an element a kernel
# forgets to write shows up. On by default under the simulator; the GPU benchmark
# turns it on for its correctness pass.
POISON = {"on": None}
_kernels: dict = {}


def _empty(shape) -> "cuda.devicearray.DeviceNDArray":
    buf = cuda.device_array(shape, np.float32)
    poison = POISON["on"]
    if poison is None:
        poison = _backend.backend() != "gpu"
    if poison:
        buf.copy_to_device(np.full(shape, np.nan, np.float32))
    return buf


SHARED_LIMIT = 48 * 1024  # static shared memory per thread block


def shared_bytes(head_dim: int, group: int, tile: int) -> int:
    """Static shared memory of `decode.make_decode_kernel` (its shared arrays)."""
    floats = group * head_dim + tile * (head_dim + 1) + tile * head_dim + group * tile + 3 * group
    return 4 * floats + 2 * 4 * tile


def launch_config(head_dim: int, group: int) -> tuple[int, int]:
    """(threads, tile): 128 threads and the largest tile of 32, 16 or 8 tokens whose
    shared arrays fit in 48 KiB on a GPU; 16 threads and 8 tokens in the simulator,
    where every thread is a Python thread."""
    if _backend.backend() != "gpu":
        return 16, 8
    for tile in (32, 16, 8):
        if shared_bytes(head_dim, group, tile) <= SHARED_LIMIT:
            return 128, tile
    raise ValueError(f"head_dim={head_dim} with {group} query heads per KV head needs "
                     f"{shared_bytes(head_dim, group, 8)} bytes of shared memory (> 48 KiB)")


def kernel_for(loaders: Loaders, head_dim: int, group_size: int):
    threads, tile = launch_config(head_dim, group_size)
    key = (loaders.name, head_dim, group_size, threads, tile)
    if key not in _kernels:
        _kernels[key] = make_decode_kernel(loaders.load_k, loaders.load_v, head_dim,
                                           group_size, threads, tile)
    return _kernels[key], threads


def sm_count() -> int:
    if _backend.backend() != "gpu":
        return SIMULATED_SMS
    return int(cuda.get_current_device().MULTIPROCESSOR_COUNT)


def choose_mode(num_seqs: int, num_kv_heads: int, longest: int, partition_size: int,
                sms: int) -> str:
    """The auto rule: 'split' for long contexts whose single-pass grid is too small."""
    if longest >= 2 * partition_size and num_seqs * num_kv_heads < 2 * sms:
        return "split"
    return "single"


def attended_ranges(context_lens: np.ndarray, window, sinks: int):
    """Per sequence: (kept, start, count) of attended tokens, all int64 arrays."""
    lens = context_lens.astype(np.int64)
    if window is None:
        zero = np.zeros_like(lens)
        return zero, zero, lens
    kept = np.minimum(sinks, lens)
    start = np.maximum(lens - window, kept)
    return kept, start, kept + lens - start


def paged_attention(query, kv_cache, block_tables, context_lens, scale=None, *, mode="auto",
                    partition_size=None, window=None, sinks=0):
    """Decode attention over kv_cache[num_blocks, 2, H_kv, B, D] -> float32 [S, H, D].

    query [S, H, D] (float32/float16), block_tables int32 [S, max_blocks], context_lens
    int32 [S]. scale defaults to 1/sqrt(D). window/sinks: attend only to the first
    `sinks` and the last `window` tokens (table entries of skipped blocks may be -1).
    NumPy query -> NumPy result; device query -> device result.
    """
    num_blocks, num_kv_heads, block_size, head_dim = check_kv_cache("kv_cache", kv_cache)
    cache = ck.to_device(kv_cache)  # a device cache (or pool view) is used in place
    return decode_with(BLOCK_MAJOR, cache, cache, query, block_tables, context_lens,
                       num_blocks=num_blocks, num_kv_heads=num_kv_heads, block_size=block_size,
                       head_dim=head_dim, scale=scale, mode=mode,
                       partition_size=partition_size, window=window, sinks=sinks)


def decode_with(loaders: Loaders, k_src, v_src, query, block_tables, context_lens, *,
                num_blocks: int, num_kv_heads: int, block_size: int, head_dim: int,
                scale=None, mode="auto", partition_size=None, window=None, sinks=0):
    """`paged_attention` for any layout: validate, choose the mode, launch.

    loaders: `layout.Loaders(name, load_k, load_v)`; `name` must be unique per pair of
    address functions (it keys the compiled-kernel cache). k_src/v_src: device arrays
    (NumPy is copied over) handed unchanged to load_k/load_v; the caller checks their
    layout. num_blocks bounds the block ids; block_size maps positions to blocks.
    Everything else is validated here exactly as for `paged_attention`.
    """
    ck.require_array("query", query, 3, ck.FLOAT_DTYPES)
    ck.require_c_contiguous("query", query)
    num_seqs, num_heads, q_dim = ck.shape_of(query)
    if q_dim != head_dim:
        raise ValueError(f"query head_dim {q_dim} does not match the cache's {head_dim}")
    if num_seqs < 1 or num_heads < 1:
        raise ValueError(f"query must hold at least one sequence and head, got {ck.shape_of(query)}")
    if num_heads % num_kv_heads:
        raise ValueError(f"query has {num_heads} heads, not a multiple of num_kv_heads={num_kv_heads}")
    tables = ck.host_ints("block_tables", block_tables, 2)
    lens = ck.host_ints("context_lens", context_lens, 1)
    if tables.dtype != np.int32 or lens.dtype != np.int32:
        raise ValueError("block_tables and context_lens must be int32")
    if tables.shape[0] != num_seqs:
        raise ValueError(f"block_tables has {tables.shape[0]} rows for {num_seqs} sequences")
    ck.require_shape("context_lens", lens, (num_seqs,))
    max_blocks = tables.shape[1]
    ck.require_range("context_lens", lens, 1, max_blocks * block_size + 1,
                     f": block_tables has {max_blocks} blocks of {block_size} tokens")
    if window is not None:
        window = ck.require_int("window", window, 1)
    sinks = ck.require_int("sinks", sinks, 0)
    if window is None and sinks:
        raise ValueError("sinks needs a window: pass window=... as well")
    kept, start, count = attended_ranges(lens, window, sinks)
    first = np.arange(max_blocks, dtype=np.int64)[None, :] * block_size  # [1, max_blocks]
    touched = (first < kept[:, None]) | ((first < lens[:, None]) &
                                        (first + block_size > start[:, None]))
    ck.require_range("block_tables", tables, 0, num_blocks,
                     f" (the cache has {num_blocks} blocks)", mask=touched)
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    if not isinstance(scale, (int, float, np.floating)) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if partition_size is not None:
        if mode == "single":
            raise ValueError("partition_size applies only to mode='split' or 'auto'")
        partition_size = ck.require_int("partition_size", partition_size, 1)
    part = partition_size or DEFAULT_PARTITION
    longest = int(count.max())
    if mode == "auto":
        mode = choose_mode(num_seqs, num_kv_heads, longest, part, sm_count())
    if mode == "single":
        part = longest
    num_parts = -(-longest // part)

    group = num_heads // num_kv_heads
    kernel, threads = kernel_for(loaders, head_dim, group)
    k_src, v_src = ck.to_device(k_src), ck.to_device(v_src)
    d_query = ck.to_device(query)
    d_tables = ck.to_device(tables if not ck.is_device(block_tables) else block_tables)
    d_lens = ck.to_device(lens if not ck.is_device(context_lens) else context_lens)
    out = _empty((num_seqs, num_heads, head_dim))  # [S, H, D]
    if num_parts == 1:
        partial = out.reshape(num_seqs, num_heads, 1, head_dim)
    else:
        partial = _empty((num_seqs, num_heads, num_parts, head_dim))  # [S, H, P, D]
    max_logits = _empty((num_seqs, num_heads, num_parts))  # [S, H, P]
    exp_sums = _empty((num_seqs, num_heads, num_parts))  # [S, H, P]
    kernel[(num_kv_heads, num_seqs, num_parts), threads](
        k_src, v_src, d_query, d_tables, d_lens, np.int32(block_size), np.float32(scale),
        np.int32(sinks), np.int32(window or 0), np.int32(part), partial, max_logits, exp_sums)
    if num_parts > 1:
        merge_partitions[(num_heads, num_seqs), min(threads, 128)](partial, max_logits, exp_sums, out)
    return out if ck.is_device(query) else out.copy_to_host()
