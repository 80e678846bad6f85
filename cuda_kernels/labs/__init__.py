"""Chapter 3.7 labs: KV-cache layouts, block alignment, and pre-allocation, measured not repeated.

    layouts     the decode kernel over every registered cache layout (the registry is
                `pagedsim.labs.kv_layouts`, the NumPy sector model `pagedsim.labs.sectors`)
    alignment   the same kernel over a pool 0..128 bytes off a 128-byte boundary
    prealloc    one device allocation per block vs one pool

`PTX_KERNELS` (built on first access) lists (name, python function, numba signature)
for `python -m cuda_kernels.report`; the alignment lab runs the fused kernel unchanged.
"""

import cuda_kernels  # noqa: F401  (selects the GPU or the simulator before numba.cuda loads)

# Compile-time constants of the PTX build: an 8B-class model head, GPU launch config.
PTX_HEAD_DIM, PTX_GROUP, PTX_THREADS, PTX_BLOCK_SIZE = 128, 4, 128, 16


def _ptx_kernels() -> list:
    import numpy as np
    from numba import types as t

    from cuda_kernels.fast.decode import decode_sig, make_decode_kernel

    from .layouts import LAYOUTS, LOADERS

    rows = []
    for name, dtype in [(n, "float16") for n in LAYOUTS] + [("vllm", "float32")]:
        spec, ld = LAYOUTS[name], LOADERS[name]
        kern = make_decode_kernel(
            ld, PTX_HEAD_DIM, PTX_GROUP, np.dtype(dtype), PTX_BLOCK_SIZE, warps=PTX_THREADS // 32
        )
        k, v, q = (
            t.Array(getattr(t, dtype), n, "C") for n in (len(spec.k_axes), len(spec.v_axes), 3)
        )
        label = f"decode_{name}[{dtype},G={PTX_GROUP},D={PTX_HEAD_DIM}]"
        rows.append((label, kern.py_func, decode_sig(k, v, q), PTX_THREADS))
    return rows


def __getattr__(name):
    if name == "PTX_KERNELS":
        globals()["PTX_KERNELS"] = _ptx_kernels()
        return globals()["PTX_KERNELS"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
