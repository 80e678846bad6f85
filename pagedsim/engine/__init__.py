"""A mini serving engine: pagedsim's block manager serving Hugging Face decoder models, v1 on
SchedulerV1 and v0 on SchedulerV0 (forks, beams, preemption by swap or recompute). Not part of
pagedsim's core: it uses the core's public calls and cuda_kernels (only when asked for), and
neither imports it (tests/core/test_core_imports.py); docs/commands.md lists its files.
"""

from .dense import DenseEngine
from .model import ModelConfig, TinyModel, Transformer
from .paged import PagedEngine
from .requests import Request, RequestState

__all__ = [
    "DenseEngine",
    "ModelConfig",
    "TinyModel",
    "Transformer",
    "PagedEngine",
    "Request",
    "RequestState",
]
