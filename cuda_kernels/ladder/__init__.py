"""The ladder: paged decode attention from a 36-line kernel to a tensor-core one, one
idea per rung, every rung a standalone kernel in its own file (it imports only what an
earlier rung introduced and showed). Read the files in FILES' order (each docstring says
what changed, why, and what it buys; cuda_kernels/README.md lists the rungs and predicts
each one's share of the read roofline; `python -m cuda_kernels.report --ladder` measures
each).

Every rung means what `cuda_kernels.paged_attention` means: `rung.decode(query,
kv_cache, block_tables, context_lens, scale=None)` -> float32 [S, H, D]; a rung may refuse
a shape it cannot serve (ValueError naming the argument). Each rung file has the same
`decode` (`rung3_online.decode(...)`); `launch.py` holds the checks they share.
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
    "rung6_tokens",
    "rung7_gqa",
    "rung8_split",
    "rung9_cp_async",
    "rung10_tensor",
    "rung11_production",
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
    def predicted_pct(self) -> tuple[float, float]:
        """(low, high) % of the read roofline the README predicts (gpu_ladder checks it)."""
        return self._mod.PREDICTED_PCT

    @property
    def file(self) -> Path:
        return Path(self._mod.__file__)

    @property
    def kernel(self):
        """Its @cuda.jit kernel (for a factory rung: the instance at the report case)."""
        return self._mod.kernel

    def reads(self, group: int) -> float:
        """K/V bytes loaded per byte of cache a decode step needs at `group` heads per KV
        head: READS, times the group for the rungs that read K/V once per query head."""
        return self._mod.READS * (1 if getattr(self._mod, "PER_GROUP", False) else group)

    def decode(self, query, kv_cache, block_tables, context_lens, scale=None, **options):
        """float32 [S, H, D], as `paged_attention` (options: the rung's `launch`'s)."""
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
