"""A mini serving engine: pagedsim's block manager serving a tiny transformer.

    model.py      the tiny Llama-shaped model (seeded NumPy weights), minus attention
    requests.py   requests, sampling, parallel samples and beam search (shared by both engines)
    dense.py      the reference engine: contiguous per-sequence K/V, NumPy attention
    adapter.py    the engine's only door into the block manager and its prefix cache
    kvstore.py    the paged K/V and who reads it: cuda_kernels, or the NumPy references
    scheduler.py  token budget, chunked prefill, preemption by swap or recompute
    paged.py      the paged engine: write_kv + paged_prefill / paged_attention per step
    generate.py   `pagedsim generate`: a small mixed workload, step by step

This package imports cuda_kernels (numba) when the kernels run; pagedsim's core never
imports this package.
"""

from .dense import DenseEngine
from .model import ModelConfig, TinyModel
from .paged import PagedEngine
from .requests import Request, RequestState

__all__ = ["DenseEngine", "ModelConfig", "TinyModel", "PagedEngine", "Request", "RequestState"]
