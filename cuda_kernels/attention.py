"""Host launcher for paged decode attention: validation, the split-K plan, grids.

`paged_attention` reads the chapter's per-layer cache; `decode_with` is the same
launcher for any layout given as `layout.Loaders` (the 3.7 labs build theirs on it).

Path (`choose_path`): "cuda_core" is `fast/decode.py`, "tensor" `fast/decode_tc.py`
(FlashInfer's `use_tensor_cores`, as vLLM v1's FlashInfer backend chooses for GQA); both
share the split-K plan and the merge. Unaligned K/V take the loaders' scalar `fallback`.

Split-K rule (`choose_partition`; FlashInfer's decode plan sizes KV chunks to the GPU,
vLLM v0's paged_attention_v2 splits into fixed 512-token partitions): the GPU holds
`slots` = SMs x resident CTAs per SM (from the driver; 132 x 2 under the simulator). For
a partition size P the launch has ctas_per_seq x sum_s ceil(count_s / P) CTAs with work,
run in ceil(CTAs / slots) waves, each as long as its longest CTA (min(P, longest) tokens
plus CTA_OVERHEAD_TOKENS). The cheapest P among the multiples of GRAIN in [MIN_PARTITION,
MAX_PASS] wins (ties: the larger). So 64 x 4096 tokens x 8 KV heads on 396 slots (G = 4 on
an H200) is cut into 3 partitions (1,536 CTAs, 4 full waves), not 512 CTAs in 2 waves,
the second a third full.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
from numba import cuda

from . import _backend
from . import _checks as ck
from .fast.decode import make_decode_kernel
from .fast.decode_geometry import geometry
from .fast.decode_tc import make_tc_decode_kernel, tc_geometry, tc_supported
from .layout import BLOCK_MAJOR, CacheShape, Loaders, check_kv_cache
from .mask import CAUSAL, ScoreMask, checked
from .merge import merge_partitions
from .primitives import aligned16, vec_width

DEFAULT_PARTITION = 512  # tokens per split-K partition when mode="split" names none (vLLM v2)
MIN_PARTITION = 256  # the auto rule never splits finer: a partition amortises its merge
MAX_PASS = 8192  # the auto rule never lets one CTA walk more tokens than this
GRAIN = 64  # auto partition sizes are multiples of this
CTA_OVERHEAD_TOKENS = 64  # the auto rule's price of one more CTA, in tokens walked
SIMULATED_SMS = 132
SIMULATED_CTAS_PER_SM = 2
MODES = ("auto", "single", "split")
PATHS = ("auto", "tensor", "cuda_core")
TC_MIN_GROUP = 4  # path="auto" takes the tensor cores from this group size up (FlashInfer)
LAST_PLAN: dict = {}  # the last launch's path, partition_size, num_partitions, threads
# NaN-fill output and partial buffers before launch, so an unwritten element shows up
# (default: on under the simulator; the GPU benchmark's correctness pass turns it on).
POISON = {"on": None}
_kernels: dict = {}
_slots: dict = {}  # (kernel, launch argument types, threads) -> cta_slots, on a GPU


def _empty(shape, dtype=np.float32) -> "cuda.devicearray.DeviceNDArray":
    buf = cuda.device_array(shape, dtype)
    poison = POISON["on"]
    if poison is None:
        poison = _backend.backend() != "gpu"
    if poison:
        buf.copy_to_device(np.full(shape, np.nan, dtype))
    return buf


SHARED_LIMIT = 48 * 1024  # static shared memory per CTA


def launch_warps() -> int:
    """4 warps (128 threads) per CTA on a GPU; 1 warp under the simulator, where every
    thread is a Python thread (warp-level code needs whole 32-lane warps)."""
    return 4 if _backend.backend() == "gpu" else 1


def kernel_for(
    loaders: Loaders,
    head_dim: int,
    group_size: int,
    dtype,
    block_size: int,
    paged: bool = True,
    path: str = "cuda_core",
):
    """(kernel, threads, chunks) for path "cuda_core" or "tensor", compiled once."""
    dtype = np.dtype(dtype)
    if path == "tensor":  # warps from the shared-memory budget; one under the simulator
        warps = tc_geometry(head_dim, group_size)["warps"] if launch_warps() > 1 else 1
        chunks = tc_geometry(head_dim, group_size, warps)["chunks"]
    else:
        warps = launch_warps()
        chunks = geometry(head_dim, group_size, dtype, warps)["chunks"]
    key = (loaders.name, head_dim, group_size, dtype.name, block_size, warps, paged, path)
    if key not in _kernels:
        if path == "tensor":
            _kernels[key] = make_tc_decode_kernel(
                loaders, head_dim, group_size, block_size, warps=warps, paged=paged
            )
        else:
            _kernels[key] = make_decode_kernel(
                loaders, head_dim, group_size, dtype, block_size, warps=warps, paged=paged
            )
    return _kernels[key], 32 * warps, chunks


def choose_path(path: str, loaders: Loaders, dtype, head_dim: int, group: int) -> str:
    """ "tensor" or "cuda_core" for these (usable) loaders: "auto" takes the tensor cores
    from TC_MIN_GROUP heads when the shape allows; "tensor" refuses one it cannot serve."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if path == "cuda_core":
        return path
    reason = tc_supported(dtype, head_dim)
    if reason is None and not loaders.vector:
        reason = (
            "the tensor-core path needs 16-byte aligned K/V rows (these fall back to scalar loads)"
        )
    if path == "tensor":
        if reason:
            raise ValueError(f"path='tensor': {reason}")  # named as paged_prefill names it
        return path
    return "tensor" if reason is None and group >= TC_MIN_GROUP else "cuda_core"


def sm_count() -> int:
    if _backend.backend() != "gpu":
        return SIMULATED_SMS
    return int(cuda.get_current_device().MULTIPROCESSOR_COUNT)


def cta_slots(kernel, args, threads: int) -> int:
    """SMs x resident CTAs per SM of `kernel` at `threads`, from the driver's occupancy
    calculator, cached (the compile registers the overload the launch then reuses)."""
    if _backend.backend() != "gpu":
        return SIMULATED_SMS * SIMULATED_CTAS_PER_SM
    try:
        types = tuple(kernel.typeof_pyval(a) for a in args)
        key = (kernel, types, threads)
        if key not in _slots:  # occupancy depends only on the compiled code and the block size
            _slots[key] = int(kernel.compile(types).max_cooperative_grid_blocks(threads))
        return _slots[key]
    except Exception as exc:  # not silent: the rule still works, with an assumed occupancy
        warnings.warn(
            f"occupancy query failed ({exc!r}); assuming {SIMULATED_CTAS_PER_SM} CTAs per SM",
            RuntimeWarning,
            stacklevel=2,
        )
        return sm_count() * SIMULATED_CTAS_PER_SM


def plan_cost(counts, part: int, ctas_per_seq: int, slots: int) -> int:
    """`choose_partition`'s cost model (the module docstring), in token-steps of one CTA."""
    counts = np.asarray(counts, np.int64)
    ctas = ctas_per_seq * int((-(-counts // part)).sum())  # empty partitions exit at once
    waves = -(-ctas // slots)
    return waves * (min(part, int(counts.max())) + CTA_OVERHEAD_TOKENS)


def choose_partition(
    counts,
    ctas_per_seq: int,
    slots: int,
    *,
    min_partition=MIN_PARTITION,
    max_pass=MAX_PASS,
    grain=GRAIN,
) -> int:
    """Tokens per partition for mode="auto" (the module docstring's rule) for `counts`
    attended tokens per sequence; a result >= max(counts) means one pass."""
    counts = np.asarray(counts, np.int64)
    if counts.size == 0 or counts.min() < 0 or ctas_per_seq < 1 or slots < 1:
        raise ValueError("counts must be non-negative, ctas_per_seq and slots positive")
    longest = max(int(counts.max()), 1)
    top = min(max_pass, -(-longest // grain) * grain)
    first = -(-min_partition // grain) * grain
    if top <= first:  # nothing to split: one pass (or the finest split allowed)
        return int(first)
    best = None
    for part in range(top, first - 1, -grain):  # largest first: ties keep the larger
        cost = plan_cost(counts, part, ctas_per_seq, slots)
        if best is None or cost < best[0]:
            best = (cost, part)
    return int(best[1])


def attended_ranges(context_lens: np.ndarray, window, sinks: int):
    """Per sequence: (kept, start, count) of attended tokens, all int64 arrays."""
    lens = context_lens.astype(np.int64)
    if window is None:
        zero = np.zeros_like(lens)
        return zero, zero, lens
    kept = np.minimum(sinks, lens)
    start = np.maximum(lens - window, kept)
    return kept, start, kept + lens - start


def check_read_blocks(tables, block_size: int, num_blocks: int, kept, start, ends, rows=None):
    """Every table entry a kernel reads (blocks holding a position < kept[s] or in
    [start[s], ends[s]), of the sequences `rows` selects) lies in [0, num_blocks)."""
    first = np.arange(tables.shape[1], dtype=np.int64)[None, :] * block_size  # [1, max_blocks]
    touched = (first < kept[:, None]) | (
        (first < ends[:, None]) & (first + block_size > start[:, None])
    )
    if rows is not None:
        touched &= rows[:, None]
    ck.require_range(
        "block_tables", tables, 0, num_blocks, f" (the cache has {num_blocks} blocks)", mask=touched
    )


def paged_attention(
    query,
    kv_cache,
    block_tables,
    context_lens,
    mask: ScoreMask = CAUSAL,
    *,
    mode="auto",
    partition_size=None,
    path="auto",
):
    """Decode attention over kv_cache[num_blocks, 2, H_kv, B, D] -> float32 [S, H, D].

    query [S, H, D] (float32/float16), block_tables int32 [S, max_blocks], context_lens
    int32 [S]. mask: a `mask.ScoreMask` (|scale| <= `_checks.MAX_SCALE`; table entries of
    blocks a window skips may be -1). path: "auto" | "tensor" | "cuda_core"; what ran is
    LAST_PLAN["path"]. NumPy query -> NumPy result; device query -> device result.
    """
    shape = check_kv_cache("kv_cache", kv_cache)
    cache = ck.to_device(kv_cache)  # a device cache (or pool view) is used in place
    options = DecodeOptions(mask, mode, partition_size, path)
    return decode_with(BLOCK_MAJOR, cache, cache, query, block_tables, context_lens, shape, options)


class DecodeOptions(NamedTuple):
    """`paged_attention`'s mask and how its launch is planned (mode, partition_size, path)."""

    mask: ScoreMask = CAUSAL  # the scale and the tokens attended
    mode: str = "auto"  # MODES
    partition_size: int | None = None  # tokens per split-K partition (mode split / auto)
    path: str = "auto"  # PATHS


def decode_with(
    loaders: Loaders,
    k_src,
    v_src,
    query,
    block_tables,
    context_lens,
    shape: CacheShape,
    options: DecodeOptions | None = None,
):
    """`paged_attention` for any layout: k_src/v_src go unchanged to the loaders; the
    caller checks their layout and gives its `shape`, the rest is validated here."""
    options = DecodeOptions() if options is None else options
    tables, lens, count, opt = _checked(query, block_tables, context_lens, shape, options)
    num_seqs, num_heads, head_dim = query.shape[0], query.shape[1], shape.head_dim
    group = num_heads // shape.num_kv_heads
    k_src, v_src = ck.to_device(k_src), ck.to_device(v_src)
    dtype = np.dtype(k_src.dtype)
    loaders = usable_loaders(loaders, k_src, v_src, head_dim)
    path = choose_path(opt.path, loaders, dtype, head_dim, group)
    kernel, threads, chunks = kernel_for(
        loaders, head_dim, group, dtype, shape.block_size, path=path
    )
    d_query = ck.to_device(query)
    d_tables = ck.to_device(tables if not ck.is_device(block_tables) else block_tables)
    d_lens = ck.to_device(lens if not ck.is_device(context_lens) else context_lens)
    out = _empty((num_seqs, num_heads, head_dim))  # [S, H, D]
    one_pass = out.reshape(num_seqs, num_heads, 1, head_dim)  # partial when P == 1
    arrays = (k_src, v_src, d_query, d_tables, d_lens)
    part = opt.partition_size or DEFAULT_PARTITION
    if opt.mode == "auto":  # out stands in for max_logits / exp_sums: same type, [S, H, P] float32
        probe = (*arrays, np.float32(1), np.int32(0), np.int32(0), np.int32(1), one_pass, out, out)
        part = choose_partition(
            count, shape.num_kv_heads * chunks, cta_slots(kernel, probe, threads)
        )
    if opt.mode == "single":
        part = int(count.max())
    num_parts = -(-int(count.max()) // part)
    grid = (shape.num_kv_heads * chunks, num_seqs, num_parts)
    parts = f"partitions (longest context / partition_size {part})"
    ck.require_grid("paged_attention", grid, ("KV heads x head chunks", "sequences", parts))
    LAST_PLAN.clear()
    LAST_PLAN.update(
        path=path, partition_size=int(part), num_partitions=int(num_parts), threads=int(threads)
    )
    partial = one_pass if num_parts == 1 else _empty((num_seqs, num_heads, num_parts, head_dim))
    max_logits = _empty((num_seqs, num_heads, num_parts))  # [S, H, P]
    exp_sums = _empty((num_seqs, num_heads, num_parts))  # [S, H, P]
    scalars = (
        np.float32(opt.mask.scale),
        np.int32(opt.mask.sinks),
        np.int32(opt.mask.sliding_window or 0),
        np.int32(part),
    )
    kernel[grid, threads](*arrays, *scalars, partial, max_logits, exp_sums)
    if num_parts > 1:
        merge_grid = ck.require_grid(
            "merge_partitions", (num_heads, num_seqs, 1), ("heads", "sequences", "")
        )
        merge_partitions[merge_grid, min(threads, 128)](partial, max_logits, exp_sums, out)
    return out if ck.is_device(query) else out.copy_to_host()


def _checked(query, block_tables, context_lens, shape: CacheShape, options: DecodeOptions):
    """(tables, lens, attended count per sequence, options normalised), validated."""
    num_seqs, _, _ = ck.check_query(query, shape.num_kv_heads, shape.head_dim, "sequence")
    block_size = shape.block_size
    tables, lens = ck.block_tables_and_lens(block_tables, context_lens, num_seqs, block_size)
    mask = checked(options.mask, shape.head_dim)
    kept, start, count = attended_ranges(lens, mask.sliding_window, mask.sinks)
    check_read_blocks(tables, block_size, shape.num_blocks, kept, start, lens)
    if options.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {options.mode!r}")
    partition_size = options.partition_size
    if partition_size is not None:
        if options.mode == "single":
            raise ValueError("partition_size applies only to mode='split' or 'auto'")
        partition_size = ck.require_int("partition_size", partition_size, 1)
    normal = options._replace(mask=mask, partition_size=partition_size)
    return tables, lens, count, normal


def usable_loaders(loaders: Loaders, k_src, v_src, head_dim: int) -> Loaders:
    """`loaders` when its 16-byte loads are legal here, else its scalar fallback."""
    if not loaders.vector:
        return loaders
    if head_dim % vec_width(k_src.dtype) == 0 and aligned16(k_src) and aligned16(v_src):
        return loaders
    if loaders.fallback is None:
        raise ValueError(
            f"{loaders.name}: 16-byte loads need head_dim % "
            f"{vec_width(k_src.dtype)} == 0 and 16-byte aligned K/V, and these "
            f"loaders have no scalar fallback"
        )
    return loaders.fallback
