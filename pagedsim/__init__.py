"""pagedsim: a step-by-step simulator of PagedAttention's KV-cache block manager.

The public contract used by the course and by outside checks: BlockPool, BlockTable,
KVCacheManager, OutOfBlocks, BlockError. The core needs only NumPy (never matplotlib or
numba); `cuda_kernels` consume its tables, slot mappings and copies, `pagedsim.draw`
draws its snapshots.
"""

from .block_pool import BlockPool
from .block_table import NULL_BLOCK, BlockTable, blocks_needed
from .errors import BlockError, OutOfBlocks, SequenceError
from .manager import KVCacheManager
from .sizing import PRESETS, ModelSpec, fit_blocks, preset
from .trace import Snapshot, Trace
from .usage import Usage

__all__ = [
    "BlockPool",
    "BlockTable",
    "KVCacheManager",
    "OutOfBlocks",
    "BlockError",
    "SequenceError",
    "NULL_BLOCK",
    "blocks_needed",
    "Usage",
    "ModelSpec",
    "PRESETS",
    "preset",
    "fit_blocks",
    "Snapshot",
    "Trace",
]
__version__ = "0.2.0"


def __getattr__(name: str) -> type:
    """pagedsim.LLM and pagedsim.SamplingParams (vLLM's offline API over the engine),
    imported on first use so that the core stays NumPy-only to import."""
    if name == "LLM":
        from .engine.llm import LLM

        return LLM
    if name == "SamplingParams":
        from .engine.sampling import SamplingParams

        return SamplingParams
    raise AttributeError(f"module 'pagedsim' has no attribute {name!r}")
