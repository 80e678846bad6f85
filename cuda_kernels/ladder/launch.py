"""Host side shared by every rung: validate exactly as `paged_attention` does, then hand
the rung a `Case` (device arrays and the shape; `decoder` makes a rung's `decode`). The
kernels trust what this checked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import float32

from .. import _checks as ck
from ..attention import _empty, check_read_blocks
from ..layout import check_kv_cache
from ..primitives import aligned16, vec_width


@dataclass
class Case:
    cache: object
    query: object
    tables: object
    lens: object
    host_lens: np.ndarray
    num_seqs: int
    num_heads: int
    num_kv_heads: int
    block_size: int
    head_dim: int
    scale: float
    dtype: np.dtype
    device_query: bool

    @property
    def group(self) -> int:
        return self.num_heads // self.num_kv_heads

    def output(self, *shape):
        return _empty(shape or (self.num_seqs, self.num_heads, self.head_dim))

    def result(self, out):
        return out if self.device_query else out.copy_to_host()

    def run(self, kernel, grid, threads: int, *extra):
        """kernel[grid, threads](cache, query, tables, lens, scale, out, *extra) -> result."""
        out = self.output()
        args = (self.cache, self.query, self.tables, self.lens, float32(self.scale), out)
        kernel[grid, threads](*args, *extra)
        return self.result(out)

    def split(self, partition_size, rung: str) -> tuple:
        """(part, grid (H_kv, S, P), partial [S, H, P, D], max_logits, exp_sums [S, H, P])."""
        part = ck.require_int("partition_size", partition_size, 1)
        num_parts = -(-int(self.host_lens.max()) // part)
        grid = (self.num_kv_heads, self.num_seqs, num_parts)
        ck.require_grid(rung, grid, ("KV heads", "sequences", "partitions"))
        shape = (self.num_seqs, self.num_heads, num_parts)
        partial = self.output(*shape, self.head_dim)
        return part, grid, partial, self.output(*shape), self.output(*shape)

    def require_vector_rows(self, rung: str) -> int:
        """Lanes per K/V row (LPR) for a rung that loads 16 bytes per lane: head_dim must
        split into 16-byte pieces whose count divides a warp, the cache 16-byte aligned."""
        vpl = vec_width(self.dtype)
        lanes = self.head_dim // vpl
        if self.head_dim % vpl or lanes > 32 or 32 % lanes:
            raise ValueError(
                f"kv_cache: {rung} needs head_dim a multiple of {vpl} whose "
                f"16-byte pieces divide a warp (head_dim {vpl}..{32 * vpl}, a "
                f"power of two), got {self.head_dim}"
            )
        if not aligned16(self.cache):
            raise ValueError(f"kv_cache: {rung} needs a 16-byte aligned cache")
        return lanes


def decoder(launch):
    """A rung's module-level `decode(query, kv_cache, block_tables, context_lens, scale=None,
    **options)`: `prepare` checks, then the rung's `launch(case, **options)` runs."""

    def decode(query, kv_cache, block_tables, context_lens, scale=None, **options):
        return launch(prepare(query, kv_cache, block_tables, context_lens, scale), **options)

    return decode


def prepare(query, kv_cache, block_tables, context_lens, scale) -> Case:
    """Validate (ValueError/TypeError naming the argument), copy NumPy inputs over."""
    num_blocks, num_kv_heads, block_size, head_dim = check_kv_cache("kv_cache", kv_cache)
    num_seqs, num_heads, _ = ck.check_query(query, num_kv_heads, head_dim, "sequence")
    tables, lens = ck.block_tables_and_lens(block_tables, context_lens, num_seqs, block_size)
    zero = np.zeros(num_seqs, np.int64)
    check_read_blocks(tables, block_size, num_blocks, zero, zero, lens.astype(np.int64))
    scale = ck.require_scale(scale, head_dim)
    ck.require_grid("ladder", (num_heads, num_seqs, 1), ("heads", "sequences", ""))
    cache = ck.to_device(kv_cache)
    return Case(
        cache=cache,
        query=ck.to_device(query),
        tables=block_tables if ck.is_device(block_tables) else ck.to_device(tables),
        lens=context_lens if ck.is_device(context_lens) else ck.to_device(lens),
        host_lens=lens,
        num_seqs=num_seqs,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        block_size=block_size,
        head_dim=head_dim,
        scale=scale,
        dtype=np.dtype(cache.dtype),
        device_query=ck.is_device(query),
    )


# The case `python -m cuda_kernels.report --ladder` compiles every rung for: float16 K/V
# and query, groups of REPORT_GROUP query heads per KV head, head_dim 128, 16-token blocks.
REPORT_GROUP = 4
REPORT_HEAD_DIM = 128
REPORT_BLOCK = 16


def report_sig(*extra) -> tuple:
    """numba types of (kv_cache, query, block_tables, context_lens, scale, out, *extra)
    at the report case."""
    from numba import types as t

    return (
        t.Array(t.float16, 5, "C"),
        t.Array(t.float16, 3, "C"),
        t.Array(t.int32, 2, "C"),
        t.Array(t.int32, 1, "C"),
        t.float32,
        t.Array(t.float32, 3, "C"),
        *extra,
    )


def pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())
