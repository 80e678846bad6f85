"""The serving settings, grouped and named as vLLM groups and names them (vllm/config/).

    CacheConfig       how the KV cache is cut and kept: block_size, the pool's size
                      (num_gpu_blocks_override), enable_prefix_caching
    SchedulerConfig   what one step may schedule and how it preempts:
                      max_num_batched_tokens, preemption_mode (v0's; v1 only recomputes)

Only the fields pagedsim reads are here, with vLLM's names, so a number keeps one name from
the command line (`--num-gpu-blocks-override`, `--block-size`, `--max-num-batched-tokens`)
to the pool. Each is checked once, when it is made.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import count_arg
from .policies.preemption import PREEMPTION_POLICIES


@dataclass(frozen=True)
class CacheConfig:
    """vLLM's CacheConfig, the fields pagedsim reads."""

    block_size: int = 16  # tokens per block
    num_gpu_blocks_override: int | None = None  # the pool's blocks (None: the caller sizes it)
    enable_prefix_caching: bool = True  # v1's automatic prefix caching

    def __post_init__(self) -> None:
        count_arg("block_size", self.block_size, 1)
        if self.num_gpu_blocks_override is not None:
            count_arg("num_gpu_blocks_override", self.num_gpu_blocks_override, 1)
        if type(self.enable_prefix_caching) is not bool:
            raise TypeError(
                f"enable_prefix_caching must be a bool, got "
                f"{type(self.enable_prefix_caching).__name__}"
            )


@dataclass(frozen=True)
class SchedulerConfig:
    """vLLM's SchedulerConfig, the fields pagedsim reads."""

    max_num_batched_tokens: int = 64  # tokens one step may compute (v1's token budget)
    preemption_mode: str = "swap"  # v0's: "recompute" or "swap" (v1 always recomputes)

    def __post_init__(self) -> None:
        count_arg("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        if self.preemption_mode not in PREEMPTION_POLICIES:
            raise ValueError(
                f"preemption_mode must be one of {PREEMPTION_POLICIES}, "
                f"got {self.preemption_mode!r}"
            )
