"""A mini serving engine: pagedsim's block manager serving Hugging Face decoder models.

    model.py      the transformer (Llama's equations with each family's switches; NumPy
                  float32), minus attention; TinyModel = seeded random weights
    hf*.py        a local Hugging Face checkpoint -> model + tokenizer, offline (hf.py)
    requests.py   requests, parallel samples and beam search; sampling.py: vLLM's sampler
    dense.py      the reference engine: contiguous per-sequence K/V, NumPy attention
    backend.py    the one seam for attention: NumPy or cuda_kernels (kernels_backend.py)
    paged.py      the paged engine: v1 on SchedulerV1, v0 on SchedulerV0 (forks, beams,
                  preemption by swap or recompute)
    llm.py        vLLM's offline `LLM` over it; generate.py: `pagedsim generate`

The engine is not part of pagedsim's core: it uses the core's public calls and
cuda_kernels (only when asked for), and neither imports it (tests/core/test_core_imports.py).
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
