"""The ladder: paged decode attention from a 36-line kernel to the tensor-core one, one
idea per rung. Read the files in this order (each docstring says what changed, why,
and what it buys; `python -m cuda_kernels.report --ladder` measures each):

    rung1_naive.py      one thread per (sequence, head), scalar loads, two passes
    rung2_cta.py        a thread block per (sequence, head), a shared-memory reduction
    rung3_online.py     online softmax: one pass
    rung4_shuffle.py    warp shuffles instead of a shared-memory tree
    rung5_vector.py     16-byte vector loads, one warp per (sequence, head)
    rung6_gqa.py        GQA: K/V read once per group of query heads
    rung7_split.py      split-K with a log-sum-exp merge (FlashDecoding)
    rung8_cp_async.py   cp.async staging: wraps the production CUDA-core fast/decode.py
    rung9_tensor.py     tensor cores: wraps the production fast/decode_tc.py

Every rung has the meaning of `cuda_kernels.paged_attention` (and of the float64
reference `cuda_kernels.reference.paged_attention`): `rung.decode(query, kv_cache,
block_tables, context_lens, scale=None)` -> float32 [S, H, D] over the cache layout
[num_blocks, 2, H_kv, block_size, head_dim]. A rung may refuse a shape it cannot serve
with a ValueError naming the argument. `launch.py` holds the checks they share.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

FILES = (
    "rung1_naive",
    "rung2_cta",
    "rung3_online",
    "rung4_shuffle",
    "rung5_vector",
    "rung6_gqa",
    "rung7_split",
    "rung8_cp_async",
    "rung9_tensor",
)


@dataclass(frozen=True)
class Rung:
    """One step of the ladder: `module` is its file (cuda_kernels/ladder/<module>.py)."""

    module: str

    @property
    def _mod(self):
        return importlib.import_module(f"{__name__}.{self.module}")

    @property
    def name(self) -> str:
        return self._mod.NAME

    @property
    def idea(self) -> str:
        return self._mod.IDEA

    @property
    def file(self) -> Path:
        return Path(self._mod.__file__)

    @property
    def kernel(self):
        """Its @cuda.jit kernel (for a factory rung: the instance at the report case)."""
        return self._mod.kernel

    def reads(self, group: int) -> float:
        """K/V bytes this rung loads per byte of the cache a decode step needs, for groups of
        `group` query heads per KV head: READS (two-pass rungs read K twice), times the
        group size for the rungs that read K/V once per query head."""
        return self._mod.READS * (1 if getattr(self._mod, "PER_GROUP", False) else group)

    def decode(self, query, kv_cache, block_tables, context_lens, scale=None, **options):
        return self._mod.decode(query, kv_cache, block_tables, context_lens, scale, **options)

    def launch(self, case, **options):
        """Run on a case `launch.prepare` validated (the benchmark times this)."""
        return self._mod.launch(case, **options)

    def ptx_spec(self):
        """(python function, numba signature, threads) at the report case."""
        from .launch import report_sig

        return self._mod.ptx_spec(report_sig)

    def __repr__(self) -> str:
        return f"Rung({self.name!r}: {self.idea})"


RUNGS = [Rung(f) for f in FILES]
