"""Chapter 3.7 labs: KV-cache layouts, block alignment, and pre-allocation, measured not repeated.

    sectors     pure NumPy: the 32-byte sectors one warp's load touches per layout / offset
    layouts     the decode kernel over fused, split, NHD and vLLM-packed caches
    alignment   the same kernel over a pool 0..128 bytes off a 128-byte boundary
    prealloc    one device allocation per block vs one pool

`PTX_KERNELS` (built on first access, so `sectors` stays NumPy-only) lists
(name, python function, numba signature string) for `numba.cuda.compile_ptx`;
`python -m cuda_kernels.report` compiles them with every other kernel.
The alignment lab runs the fused kernel unchanged, so it adds no entry.
"""

import cuda_kernels  # noqa: F401  (selects the GPU or the simulator before numba.cuda loads)

# Compile-time constants of the PTX build: an 8B-class model head, GPU launch config.
PTX_HEAD_DIM, PTX_GROUP, PTX_THREADS, PTX_TILE = 128, 4, 128, 32
_TAIL = ("{q}[:, :, ::1], int32[:, ::1], int32[::1], int32, float32, int32, int32, int32, "
         "float32[:, :, :, ::1], float32[:, :, ::1], float32[:, :, ::1]")


def _ptx_kernels() -> list:
    from cuda_kernels.decode import make_decode_kernel

    from .layouts import LOADERS
    c4, c5 = "{t}[:, :, :, ::1]", "{t}[:, :, :, :, ::1]"
    srcs = {"fused": (c5, c5), "split": (c4, c4), "nhd": (c4, c4), "vllm": (c5, c4)}
    rows = []
    for name, dtype in [(n, "float16") for n in srcs] + [("vllm", "float32")]:
        ld = LOADERS[name]
        kern = make_decode_kernel(ld.load_k, ld.load_v, PTX_HEAD_DIM, PTX_GROUP, PTX_THREADS, PTX_TILE)
        k, v = (s.format(t=dtype) for s in srcs[name])
        sig = f"void({k}, {v}, {_TAIL.format(q=dtype)})"
        rows.append((f"decode_{name}[{dtype},G={PTX_GROUP},D={PTX_HEAD_DIM}]", kern.py_func, sig))
    return rows


def __getattr__(name):
    if name == "PTX_KERNELS":
        globals()["PTX_KERNELS"] = _ptx_kernels()
        return globals()["PTX_KERNELS"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
