"""Compile every kernel to PTX, SASS and ptxas resource use: the real-GPU gate, without a GPU.

    python -m cuda_kernels.report [--json] [--arch sm_90 ...] [--ptx-dir DIR]

For each kernel (write_kv, copy_blocks and merge in their vector and scalar forms; decode-
factory instances: vector fp16/fp32, a pool view, the scalar fallback, the contiguous
baseline; the 3.7 labs' `alloc.PTX_KERNELS` and `labs.PTX_KERNELS`) and each arch
(default sm_80 and sm_90):
  1. `numba.cuda.compile_ptx` -> PTX (written to DIR/<kernel>_<arch>.ptx with --ptx-dir);
  2. `ptxas -v -arch=<arch>` -> a cubin, and registers, shared memory, stack and spill bytes;
  3. `nvdisasm -c` (or `cuobjdump -sass`) on the cubin -> SASS.
Each row then carries the figures of `disasm.py` (whose docstring states how the
steady-state loop is found): global_load_bits, shuffles, barriers from the PTX;
loop_sass, sass_per_kv_byte, hmma / hgmma / ldsm / ldgsts (counts in the steady-state
loop), loop_sass_per_hmma and flops_per_loop_sass from the SASS; ctas_per_sm /
warps_per_sm, an occupancy estimate from registers, shared memory and the CTA's thread
count; bound (memory, issue or tensor), peak and expected_pct_of_peak from the H200
model of `roofline.py` (formula and constants in its docstring), issue_budget_pct
(sass_per_kv_byte over the 0.243 SASS per byte an H200 can issue at 4.3 TB/s); path:
"tensor" or "cuda_core" for the decode kernels (paged_decode_tc is what path="auto"
launches for G >= 4, float16, head_dim % 16 == 0).

compile_ptx needs no GPU but does need numba's real CUDA target, so under the simulator
this module re-runs itself in a subprocess with PAGEDSIM_CUDA=gpu and NUMBA_ENABLE_CUDASIM=0.
ptxas, nvdisasm and cuobjdump come from the nvidia-cuda-nvcc, -nvdisasm and -cuobjdump
wheels (the `ptx` extra) or PATH; without a disassembler the SASS fields are None.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from . import _backend, disasm, roofline

ARCHS = ("sm_80", "sm_90")
DEFAULT_THREADS = 128
_PTXAS_LINE = {
    "registers": re.compile(r"Used (\d+) registers"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
}


def find_tool(name: str) -> str | None:
    """A CUDA binary (ptxas, nvdisasm, cuobjdump) from the nvidia-* wheels, else PATH."""
    try:
        import nvidia
        for root in nvidia.__path__:
            for candidate in sorted(Path(root).glob(f"cu*/bin/{name}"), reverse=True):
                return str(candidate)
    except ImportError:
        pass
    return shutil.which(name)


def find_ptxas() -> str | None:
    return find_tool("ptxas")


def kernel_specs():
    """(name, python function, signature[, threads]) for every kernel the package launches."""
    import numpy as np
    from numba import types as t

    from .block_copy import copy_blocks_kernel, copy_blocks_vec
    from .decode import make_decode_kernel
    from .labs.contiguous import CONTIGUOUS
    from .layout import BLOCK_MAJOR, BLOCK_MAJOR_SCALAR
    from .merge import merge_partitions
    from .write_kv import write_kv_kernel, write_kv_vec

    f16c5, f16a5 = t.Array(t.float16, 5, "C"), t.Array(t.float16, 5, "A")
    f32c3, f32c4 = t.Array(t.float32, 3, "C"), t.Array(t.float32, 4, "C")

    def decode_sig(cache, q):
        return (cache, cache, q, t.Array(t.int32, 2, "C"), t.Array(t.int32, 1, "C"),
                t.float32, t.int32, t.int32, t.int32, f32c4, f32c3, f32c3)

    write_sig = (f16c5, t.Array(t.float16, 3, "C"), t.Array(t.float16, 3, "C"),
                 t.Array(t.int64, 1, "C"))
    pairs = t.Array(t.int32, 2, "C")
    specs = [
        ("write_kv[f16]", write_kv_kernel.py_func, write_sig),
        ("write_kv_vec[f16]", write_kv_vec.py_func, write_sig),
        ("copy_blocks[f16]", copy_blocks_kernel.py_func, (f16c5, f16c5, pairs)),
        ("copy_blocks_vec[f16]", copy_blocks_vec.py_func, (f16c5, f16c5, pairs, t.int64)),
        ("copy_blocks_vec[f16,pool-view]", copy_blocks_vec.py_func, (f16a5, f16a5, pairs, t.int64)),
        ("merge_partitions", merge_partitions.py_func, (f32c4, f32c3, f32c3, f32c3)),
    ]
    warps = 4  # the GPU launch configuration (`attention.launch_warps` on a GPU)
    threads = 32 * warps
    # (name, loaders, numba dtype, group, head_dim, cache type, paged, block_size); the NHD
    # layout and the other lab layouts come with labs.PTX_KERNELS below
    decodes = [
        ("float16,G=8,D=128", BLOCK_MAJOR, t.float16, 8, 128, f16c5, True, 16),
        ("float16,G=4,D=128", BLOCK_MAJOR, t.float16, 4, 128, f16c5, True, 16),
        ("float16,G=1,D=128", BLOCK_MAJOR, t.float16, 1, 128, f16c5, True, 16),
        ("float32,G=4,D=80", BLOCK_MAJOR, t.float32, 4, 80, t.Array(t.float32, 5, "C"), True, 16),
        ("pool-view,G=4,D=128", BLOCK_MAJOR, t.float16, 4, 128, f16a5, True, 16),
        ("scalar,float16,G=8,D=128", BLOCK_MAJOR_SCALAR, t.float16, 8, 128, f16c5, True, 16),
        ("contiguous,float16,G=4,D=128", CONTIGUOUS, t.float16, 4, 128, f16c5, False, 4096),
    ]
    for name, loaders, dtype, group, head_dim, cache, paged, block_size in decodes:
        kern = make_decode_kernel(loaders, head_dim, group, np.dtype(dtype.name), block_size,
                                  warps=warps, paged=paged)
        specs.append((f"paged_decode[{name}]", kern.py_func,
                      decode_sig(cache, t.Array(dtype, 3, "C")), threads))
    from .decode_tc import make_tc_decode_kernel, tc_geometry  # path="tensor", as on a GPU
    for group in (4, 8, 16):
        kern = make_tc_decode_kernel(BLOCK_MAJOR, 128, group, 16)
        specs.append((f"paged_decode_tc[float16,G={group},D=128]", kern.py_func,
                      decode_sig(f16c5, t.Array(t.float16, 3, "C")),
                      32 * tc_geometry(128, group)["warps"]))
    # The chapter 3.7 labs: concurrent allocators and the layout/alignment decode variants.
    from . import alloc, labs
    for package in (alloc, labs):
        prefix = package.__name__.rsplit(".", 1)[-1]
        specs += [(f"{prefix}.{name}", *rest) for name, *rest in package.PTX_KERNELS]
    from .prefill import make_prefill_kernel  # paged prefill: (NT=128, T, QT) as on a GPU
    i32 = t.Array(t.int32, 1, "C")
    for dtype, group, head_dim, tile, cache in ((t.float16, 8, 128, 32, f16c5),
                                                (t.float16, 1, 128, 32, f16c5),
                                                (t.float32, 4, 80, 32, t.Array(t.float32, 5, "C"))):
        kern = make_prefill_kernel(head_dim, group, 128, tile, max(1, 16 // group),
                                   loaders=BLOCK_MAJOR, dtype=np.dtype(dtype.name))
        specs.append((f"paged_prefill[{dtype.name},G={group},D={head_dim}]", kern.py_func,
                      (cache, t.Array(dtype, 3, "C"), t.Array(t.int32, 2, "C"), i32, i32, i32, i32,
                       t.int32, t.float32, t.int32, t.int32, t.int32, f32c3), 128))
    from .prefill_tc import launch_config, make_prefill_tc_kernel  # the GPU's shapes
    for group, head_dim in ((8, 128), (1, 128), (8, 256), (4, 80)):
        warps, tile, q_regs, o_split = launch_config(head_dim)
        kern = make_prefill_tc_kernel(head_dim, group, warps, tile, 16, q_regs, o_split)
        specs.append((f"paged_prefill_tc[float16,G={group},D={head_dim}]", kern.py_func,
                      (f16c5, t.Array(t.float16, 3, "C"), t.Array(t.int32, 2, "C"), i32, i32, i32,
                       i32, t.int32, t.float32, t.int32, t.int32, t.int32, f32c3), 32 * warps))
    return specs


def parse_ptxas(text: str) -> dict:
    """ptxas -v output -> one row. A PTX file may hold several functions (a kernel and
    the device functions it did not inline): registers and shared memory are the most
    any one uses; stack and spill bytes are summed over all of them."""
    found = {key: [int(n) for n in rx.findall(text)] for key, rx in _PTXAS_LINE.items()}
    row = {key: max(found[key], default=0) for key in ("registers", "shared_bytes")}
    row["stack_bytes"] = sum(found["stack_bytes"])
    row["spill_bytes"] = sum(found["spill_stores"]) + sum(found["spill_loads"])
    return row


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{what} failed:\n{done.stderr}")
    return done


def disassemble(cubin: Path) -> str | None:
    """SASS text of a cubin: nvdisasm -c (labels kept), else cuobjdump -sass, else None."""
    nvdisasm, cuobjdump = find_tool("nvdisasm"), find_tool("cuobjdump")
    if nvdisasm:
        return _run([nvdisasm, "-c", str(cubin)], f"nvdisasm on {cubin.name}").stdout
    if cuobjdump:
        return _run([cuobjdump, "-sass", str(cubin)], f"cuobjdump on {cubin.name}").stdout
    return None


def _one(ptxas: str, name: str, func, sig, threads: int, arch: str, tmp: Path,
         ptx_dir: Path | None) -> dict:
    from numba.cuda import compile_ptx
    ptx, _ = compile_ptx(func, sig, cc=(int(arch[3]), int(arch[4:])))
    stem = f"{re.sub(r'[^A-Za-z0-9]+', '_', name).strip('_')}_{arch}"
    path = tmp / f"{stem}.ptx"
    path.write_text(ptx)
    if ptx_dir is not None:
        (ptx_dir / path.name).write_text(ptx)
    cubin = tmp / f"{stem}.cubin"
    done = _run([ptxas, "-v", f"-arch={arch}", str(path), "-o", str(cubin)],
                f"ptxas on {name} for {arch}")
    row = {"kernel": name, "arch": arch, "threads": threads, **parse_ptxas(done.stderr),
           **disasm.ptx_stats(ptx)}
    sass = disassemble(cubin)
    row.update(disasm.steady_loop(disasm.parse_sass(sass)) if sass is not None else
               disasm.steady_loop([]))
    row.update(disasm.occupancy(arch, row["registers"], row["shared_bytes"], threads))
    row.update(roofline.bound(row))
    row["path"] = path_of(name)
    return row


def path_of(kernel: str) -> str | None:
    """The paged_attention path a decode kernel serves ("tensor" / "cuda_core")."""
    if kernel.startswith("paged_decode_tc["):
        return "tensor"
    return "cuda_core" if kernel.startswith("paged_decode[") else None


class _NoDevice:
    """Stand-in for `get_current_device()` on a machine without a GPU.

    compile_ptx compiles the kernel for the cc it is given, but a `@cuda.jit(device=True)`
    function called from it is compiled by its dispatcher for the *current device's*
    cc, which needs a driver. Only that cc is read; the kernel's own cc decides the PTX.
    """
    compute_capability = (8, 0)


def _allow_device_functions_without_gpu() -> None:
    from numba import cuda
    from numba.cuda import dispatcher
    if not cuda.is_available():
        dispatcher.get_current_device = _NoDevice


def collect(archs, ptx_dir: Path | None = None, workers: int | None = None) -> list[dict]:
    """Every (kernel, arch) row, in kernel_specs() order then arch order. numba's compiler
    holds a process-wide lock, so the kernels are shared among `workers` forked processes
    (default: the CPU count, at most 4), each rebuilding the specs and compiling its
    share. A kernel's archs are compiled by the same worker, one after the other: the
    device functions it calls are compiled once per process (for the cc `_NoDevice`
    names) and reused by the second arch (the whole report: about 22% less CPU time)."""
    _allow_device_functions_without_gpu()
    if find_ptxas() is None:
        raise RuntimeError("ptxas not found: install the ptx extra (nvidia-cuda-nvcc)")
    if ptx_dir is not None:
        ptx_dir.mkdir(parents=True, exist_ok=True)
    kernels = list(range(len(kernel_specs())))
    workers = max(1, min(workers or os.cpu_count() or 1, 4, len(kernels)))
    with tempfile.TemporaryDirectory() as tmp:
        args = [(i, tuple(archs), tmp, ptx_dir) for i in kernels]
        if workers == 1:
            per_kernel = [_job(*a) for a in args]
        else:
            fork = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(workers, mp_context=fork) as pool:
                per_kernel = list(pool.map(_job, *zip(*args, strict=True), chunksize=1))
    return [row for rows in per_kernel for row in rows]


_SPECS: list = []


def _job(index: int, archs: tuple, tmp: str, ptx_dir: Path | None) -> list[dict]:
    """The rows of kernel `index` for every arch, in a worker: the specs are rebuilt once
    per process (they hold closures, which do not pickle)."""
    if not _SPECS:
        _SPECS.extend(_with_threads(spec) for spec in kernel_specs())
    return [_one(find_ptxas(), *_SPECS[index], arch, Path(tmp), ptx_dir) for arch in archs]


def _with_threads(spec: tuple) -> tuple:
    """(name, func, sig[, threads]) -> (name, func, sig, threads); 128 threads by default."""
    return spec if len(spec) == 4 else (*spec, DEFAULT_THREADS)


COLUMNS = (("kernel", 44, "s"), ("arch", 6, "s"), ("registers", 5, "d"), ("shared_bytes", 7, "d"),
           ("spill_bytes", 6, "d"), ("global_load_bits", 5, "d"), ("shuffles", 5, "d"),
           ("barriers", 4, "d"), ("loop_sass", 6, "d"), ("sass_per_kv_byte", 8, ".3f"),
           ("hmma", 5, "d"), ("loop_sass_per_hmma", 7, ".1f"), ("ctas_per_sm", 5, "d"),
           ("warps_per_sm", 5, "d"), ("bound", 7, "s"), ("expected_pct_of_peak", 6, ".1f"))
HEADS = ("kernel", "arch", "regs", "smem B", "spill", "ldbit", "shfl", "bar", "loop", "sass/B",
         "hmma", "sass/mma", "CTA/SM", "warp/SM", "bound", "%peak")


def table(rows: list[dict]) -> str:
    head = " ".join(f"{h:{w}}" if f == "s" else f"{h:>{w}}"
                    for h, (_, w, f) in zip(HEADS, COLUMNS, strict=True))
    lines = [head, "-" * len(head)]
    for r in rows:
        cells = [(f"{r[k]:{w}{f}}" if f == "s" else f"{r[k]:>{w}{f}}")
                 if r.get(k) is not None else f"{'-':>{w}}" for k, w, f in COLUMNS]
        lines.append(" ".join(cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cuda_kernels.report",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument("--arch", action="append", choices=ARCHS, help="repeatable; default: both")
    parser.add_argument("--ptx-dir", type=Path, help="also write each kernel's PTX here")
    args = parser.parse_args(argv)
    if _backend.backend() != "gpu":  # compile_ptx needs the real CUDA target: re-run
        env = dict(os.environ, PAGEDSIM_CUDA="gpu", NUMBA_ENABLE_CUDASIM="0")
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        argv = sys.argv[1:] if argv is None else argv
        return subprocess.run([sys.executable, "-m", "cuda_kernels.report", *argv],
                              env=env).returncode
    began = time.perf_counter()
    rows = collect(tuple(args.arch or ARCHS), args.ptx_dir)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(table(rows))
        print(f"{len(rows)} kernels compiled in {time.perf_counter() - began:.1f} s; "
              f"spills: {sum(r['spill_bytes'] for r in rows)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
