"""A mini serving engine: pagedsim's block manager serving Hugging Face decoder models.

    model.py            the transformer (Llama's equations with each family's switches:
                        Qwen2/3, Mistral, Gemma 1-3, Phi-3, OLMo-2, SmolLM3, Granite; NumPy
                        float32), minus attention; TinyModel = seeded random weights
    hf.py               a local Hugging Face checkpoint -> model + tokenizer (offline), read
                        by the hf_*.py beside it:
    hf_json.py          its JSON files, size-limited, and each field checked (CheckpointError)
    hf_families.py      the families served, and each one's transformers config defaults
    hf_config.py        config.json -> ModelConfig, family by family
    hf_rope.py          the rope fields -> rope_theta and the rope scaling
    hf_generation.py    generation_config.json, and the token ids that stop a sequence
    hf_weights.py       the weight files -> float32 arrays, headers checked first
    requests.py         requests, sampling, parallel samples and beam search (both engines)
    dense.py            the reference engine: contiguous per-sequence K/V, NumPy attention
    backend.py          the one seam for attention: NumPy or the kernels, chosen once
    kernels_backend.py  that seam on cuda_kernels (the only import of cuda_kernels)
    kvstore.py          the paged K/V per layer, read and written through the backend
    paged.py            the paged engine: schedule() -> the model -> update_from_output();
                        v1 on pagedsim's SchedulerV1 (window managers and the hybrid
                        allocator for sliding layers), v0 on SchedulerV0 (forks,
                        beams, preemption by swap or recompute)
    step_log.py         what a step did to the blocks, for the step log
    generate.py         `pagedsim generate`: text from the shipped model, step by step,
                        served through llm.py (vLLM's `LLM`), as generate_cli.py's
                        command line asks

Where the engine sits: it ships inside the pagedsim package but is *not* part of
pagedsim's core. It is a consumer of two libraries -- the core (its schedulers and
managers, public calls only) and cuda_kernels (through kernels_backend.py, only when the kernels
are asked for) -- like pagedsim.app and pagedsim.labs, and nothing in the core or in
cuda_kernels imports it (tests/core/test_core_imports.py). It stays in the package,
rather than beside it, so that `pip install pagedsim` and `pagedsim generate` bring the
shipped model and the command with them.
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
