"""The serving settings, grouped and named as vLLM groups and names them (vllm/config/).

Only the fields pagedsim reads, with vLLM's names, so a number keeps one name from the
command line to the pool. Each is checked once, when it is made.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import bool_arg, count_arg
from .policies.preemption import PREEMPTION
from .request_queue import make_request_queue


@dataclass(frozen=True)
class CacheConfig:
    """vLLM's CacheConfig, the fields pagedsim reads."""

    block_size: int = 16  # tokens per block
    num_gpu_blocks_override: int | None = None  # the pool's blocks (None: the caller sizes it)
    enable_prefix_caching: bool = True  # v1's automatic prefix caching
    num_gpu_blocks: int | None = None  # the pool's blocks, once sized (the engine's)
    num_cpu_blocks: int | None = None  # v0's swap space (None: the engine's 4 x num_gpu_blocks)

    def __post_init__(self) -> None:
        count_arg("block_size", self.block_size, 1)
        for name, low in (
            ("num_gpu_blocks_override", 1),
            ("num_gpu_blocks", 1),
            ("num_cpu_blocks", 0),
        ):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, count_arg(name, getattr(self, name), low))
        bool_arg("enable_prefix_caching", self.enable_prefix_caching)


@dataclass(frozen=True)
class SchedulerConfig:
    """vLLM's SchedulerConfig, the fields pagedsim reads."""

    max_num_batched_tokens: int = 64  # tokens one step may compute (v1's token budget)
    preemption_mode: str = "swap"  # v0's: "recompute" or "swap" (v1 always recomputes)
    max_num_seqs: int = 256  # requests (v1) or sequences (v0) running at once
    policy: str = "fcfs"  # v1's waiting order: "fcfs" or "priority"
    long_prefill_token_threshold: int = 0  # v1: cap on one request's prefill chunk (0: none)
    max_model_len: int = 8192  # v1: a longer request is refused (vLLM's default)

    def __post_init__(self) -> None:
        for name, low in (
            ("max_num_batched_tokens", 1),
            ("max_num_seqs", 1),
            ("long_prefill_token_threshold", 0),
            ("max_model_len", 1),
        ):
            object.__setattr__(self, name, count_arg(name, getattr(self, name), low))
        make_request_queue(self.policy)  # TypeError / ValueError naming policy
        if self.preemption_mode not in PREEMPTION:  # the registry as it is now (a test adds one)
            raise ValueError(
                f"preemption_mode must be one of {tuple(PREEMPTION)}, got {self.preemption_mode!r}"
            )
