"""Host-side checks shared by every launcher, and host <-> device array plumbing.

Every launcher validates its arguments here *before* any launch, so a kernel can trust its
inputs and a refused call has changed no buffer. A violation names the argument (and the
offending index): a TypeError for the wrong kind of thing (`ArgumentTypeError`, also a
ValueError, for an array of the wrong dtype or rank), a ValueError for a wrong value (out
of range, not finite, not representable in the kernel's int32 / float32 argument).

Arrays may be NumPy arrays (copied to the device and, for outputs, back) or device arrays
(used in place, a strided view such as `kv_pool[:, layer]` included).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
INT32_LIMIT = 2**31  # kernel integer arguments are int32
GRID_LIMITS = (2**31 - 1, 65535, 65535)  # CUDA's max grid x, y, z (every cc >= 3.0)
FLOAT32_MAX = float(np.finfo(np.float32).max)
# The largest |scale| a launcher accepts: with an fp16 K (< 2^16) and head_dim <= 2^8 a
# score stays finite in float32 for any |q| < 2^95 (scale = 1e38 gave NaN, issue 33).
MAX_SCALE = 2.0**16


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong kind (not an array, wrong dtype or rank)."""


def is_device(a) -> bool:
    """A numba device array (or the simulator's stand-in), not a host array."""
    return not isinstance(a, np.ndarray) and bool(getattr(a, "__cuda_ndarray__", False))


def shape_of(a) -> tuple:
    return tuple(int(n) for n in a.shape)


def require_array(name: str, a, ndim: int, dtypes=None):
    if not (isinstance(a, np.ndarray) or is_device(a)):
        raise ArgumentTypeError(
            f"{name} must be a NumPy or CUDA device array, got {type(a).__name__}"
        )
    if len(a.shape) != ndim:
        raise ArgumentTypeError(f"{name} must have {ndim} dimensions, got shape {shape_of(a)}")
    if dtypes is not None and np.dtype(a.dtype) not in [np.dtype(d) for d in dtypes]:
        names = "/".join(np.dtype(d).name for d in dtypes)
        raise ArgumentTypeError(f"{name} must be {names}, got {np.dtype(a.dtype).name}")


def require_shape(name: str, a, expected: tuple):
    if shape_of(a) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {shape_of(a)}")


def require_contiguous(name: str, a, skip: int = 0):
    """C-contiguous past the first `skip` dimensions (a pool view's outer stride is free)."""
    item = np.dtype(a.dtype).itemsize
    expect = item
    for size, stride in zip(reversed(a.shape[skip:]), reversed(a.strides[skip:]), strict=True):
        if size > 1 and stride != expect:
            raise ValueError(
                f"{name} must be C-contiguous in its inner dimensions "
                f"(strides {tuple(a.strides)}, shape {shape_of(a)})"
            )
        expect *= size


def index_array(name: str, a, ndim: int):
    """A nest of ints `ndim` deep -> int64 array (floats, strings, bools and ragged rows
    refused); anything else passes through."""
    if not isinstance(a, (list, tuple)):
        return a
    flat = list(a)
    for _ in range(ndim - 1):
        if not all(isinstance(r, (list, tuple, np.ndarray)) for r in flat):
            raise ArgumentTypeError(f"{name} must be a {ndim}-D nest of ints (a list of rows)")
        widths = sorted({len(r) for r in flat})
        if len(widths) > 1:
            raise ValueError(f"{name} has rows of different lengths {widths}")
        flat = [x for r in flat for x in r]
    bad = [
        x for x in flat if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer))
    ]
    if bad:
        raise TypeError(f"{name} must hold ints, got {bad[0]!r} ({type(bad[0]).__name__})")
    if any(not -(2**63) <= int(x) < 2**63 for x in flat):
        raise ValueError(f"{name} holds a value outside int64")
    arr = np.asarray(a, dtype=np.int64)
    return arr if arr.ndim == ndim else arr.reshape((0,) * ndim)  # [] for an empty nest


def host_ints(name: str, a, ndim: int) -> np.ndarray:
    a = index_array(name, a, ndim)
    require_array(name, a, ndim, (np.int32, np.int64))
    return a.copy_to_host() if is_device(a) else np.asarray(a)


def first_bad(mask: np.ndarray):
    hits = np.argwhere(mask)
    return None if len(hits) == 0 else tuple(int(i) for i in hits[0])


def require_range(name: str, values: np.ndarray, lo: int, hi: int, what: str = "", mask=None):
    bad = (values < lo) | (values >= hi)
    if mask is not None:
        bad &= mask
    at = first_bad(bad)
    if at is not None:
        idx = at[0] if len(at) == 1 else at
        raise ValueError(f"{name}[{idx}] = {int(values[at])} is out of range [{lo}, {hi}){what}")


def require_int(name: str, value, lo: int, hi: int | None = INT32_LIMIT) -> int:
    """An int (Python or NumPy, never a bool) in [lo, hi); hi None lifts the bound."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < lo or (hi is not None and value >= hi):
        raise ValueError(
            f"{name} = {value} must be >= {lo}" + (f" and < {hi}" if hi is not None else "")
        )
    return int(value)


def require_scale(scale, head_dim: int) -> float:
    """The softmax scale as a finite float in [-MAX_SCALE, MAX_SCALE] (default
    1/sqrt(head_dim))."""
    if scale is None:
        return 1.0 / float(np.sqrt(head_dim))
    if isinstance(scale, (bool, np.bool_)) or not isinstance(
        scale, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"scale must be a real number, got {scale!r} ({type(scale).__name__})")
    if isinstance(scale, (int, np.integer)) and abs(int(scale)) > FLOAT32_MAX:
        raise ValueError(f"scale must be a finite float32, got {scale!r}")
    value = float(scale)
    if not np.isfinite(value) or abs(value) > FLOAT32_MAX:
        raise ValueError(f"scale must be a finite float32, got {scale!r}")
    if abs(value) > MAX_SCALE:
        raise ValueError(
            f"scale must lie in [-{MAX_SCALE:g}, {MAX_SCALE:g}] (a larger one "
            f"overflows the float32 scores), got {scale!r}"
        )
    return value


def require_out_dtype(out_dtype) -> np.dtype:
    try:
        dtype = np.dtype(out_dtype)
    except TypeError:
        raise ValueError(f"out_dtype must be float32 or float16, got {out_dtype!r}") from None
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"out_dtype must be float32 or float16, got {out_dtype!r}")
    return dtype


def to_device(a, dtype=None):
    if is_device(a):
        return a
    return cuda.to_device(np.ascontiguousarray(a, dtype=dtype))


def write_back(host, dev):
    if dev is not host and isinstance(host, np.ndarray):
        host[...] = dev.copy_to_host()


def check_query(query, num_kv_heads: int, head_dim: int, what: str = "sequence") -> tuple:
    """The shape of a valid query [rows, H, D] for this cache."""
    require_array("query", query, 3, FLOAT_DTYPES)
    require_contiguous("query", query)
    rows, num_heads, q_dim = shape_of(query)
    if q_dim != head_dim:
        raise ValueError(f"query head_dim {q_dim} does not match the cache's {head_dim}")
    if rows < 1 or num_heads < 1:
        raise ValueError(f"query must hold at least one {what} and head, got {shape_of(query)}")
    if num_heads % num_kv_heads:
        raise ValueError(
            f"query has {num_heads} heads, not a multiple of num_kv_heads={num_kv_heads}"
        )
    return rows, num_heads, q_dim


def require_grid(launcher: str, grid: tuple, names: tuple) -> tuple:
    """A launch grid CUDA can run (CUDA C++ Programming Guide, "Compute Capabilities"; the
    simulator does not enforce it); names[i] says what dimension i counts."""
    for axis, (size, limit, name) in enumerate(zip(grid, GRID_LIMITS, names, strict=True)):
        if size > limit:
            raise ValueError(
                f"{launcher}: {size} {name} exceed the grid's {'xyz'[axis]} limit of {limit:,}"
            )
    return tuple(int(n) for n in grid)


def fp16_mma_refusal(path: str, head_dim: int, cache_dtype, max_head_dim: int) -> str | None:
    """Why an fp16 matrix-core kernel cannot serve this cache, or None."""
    if np.dtype(cache_dtype) != np.float16:
        return f"the {path} path needs a float16 cache, got {np.dtype(cache_dtype).name}"
    if head_dim % 16 or not 16 <= head_dim <= max_head_dim:
        return (
            f"the {path} path needs head_dim a multiple of 16 in [16, {max_head_dim}], "
            f"got {head_dim}"
        )
    return None


def block_tables_and_lens(block_tables, context_lens, num_seqs: int, block_size: int):
    """(tables, lens) on the host: int32 [num_seqs, max_blocks] and [num_seqs] in
    1 .. max_blocks * block_size."""
    tables = host_ints("block_tables", block_tables, 2)
    lens = host_ints("context_lens", context_lens, 1)
    if tables.dtype != np.int32 or lens.dtype != np.int32:
        raise ValueError("block_tables and context_lens must be int32")
    if tables.shape[0] != num_seqs:
        raise ValueError(f"block_tables has {tables.shape[0]} rows for {num_seqs} sequences")
    require_shape("context_lens", lens, (num_seqs,))
    max_blocks = tables.shape[1]
    why = f": block_tables has {max_blocks} blocks of {block_size} tokens"
    require_range("context_lens", lens, 1, max_blocks * block_size + 1, why)
    return tables, lens
