"""Compile every kernel to PTX, SASS and ptxas resource use: the real-GPU gate, without a GPU.

    python -m cuda_kernels.report [--json | --markdown] [--arch sm_90 ...] [--ptx-dir DIR]

For each kernel (write_kv, copy_blocks and merge in their vector and scalar forms; decode-
factory instances: vector fp16/fp32, a pool view, the scalar fallback, the contiguous
baseline; the 3.7 labs' `alloc.PTX_KERNELS` and `labs.PTX_KERNELS`) and each arch
(default sm_80 and sm_90):
  1. `numba.cuda.compile_ptx` -> PTX (written to DIR/<kernel>_<arch>.ptx with --ptx-dir);
  2. `ptxas -v -arch=<arch>` -> a cubin, and registers, shared memory, stack and spill bytes;
  3. `nvdisasm -c` (or `cuobjdump -sass`) on the cubin -> SASS.
Each row then carries the figures of `tools/disasm.py` (whose docstring states how the
steady-state loop is found): global_load_bits, shuffles, barriers from the PTX;
loop_sass, sass_per_kv_byte, hmma / hgmma / ldsm / ldgsts (counts in the steady-state
loop), loop_sass_per_hmma and flops_per_loop_sass from the SASS; ctas_per_sm /
warps_per_sm, an occupancy estimate from registers, shared memory and the CTA's thread
count; from the H200 model of `tools/roofline.py` (formula, constants and sources in its
docstring): bound (tensor, issue, l2 or memory), peak, expected_pct_of_peak,
expected_pct_of_tensor_peak, hbm_bytes, flops_per_hbm_byte (the arithmetic intensity
used) and issue_budget_pct (sass_per_kv_byte over the 0.243 SASS per byte an H200 can
issue at 4.3 TB/s); reuse, how many CTAs read each K/V byte: 1 for decode, and for the
prefill rows (`prefill_case`) the count at roofline.HEADLINE with the row's G, query
tokens per CTA (q_tile) and K/V tile (kv_tile), with reuse_case saying so; path:
"tensor" or "cuda_core" for the decode kernels (paged_decode_tc is what path="auto"
launches for G >= 4, float16, head_dim % 16 == 0). paged_prefill_wgmma (path="wgmma",
Hopper's warpgroup MMA) exists only for sm_90a: its row comes with --arch sm_90 and says
arch "sm_90a" (compiled with cc (9, 0, "a"), ptxas -arch=sm_90a, PTX file *_sm_90a.ptx).

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
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from . import _backend
from .tools import disasm, roofline
from .tools.report_format import ladder_table, markdown, table

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
    from .fast.decode import make_decode_kernel
    from .labs.contiguous import CONTIGUOUS
    from .layout import BLOCK_MAJOR, BLOCK_MAJOR_SCALAR
    from .merge import merge_partitions
    from .write_kv import write_kv_kernel, write_kv_vec

    f16c5, f16a5 = t.Array(t.float16, 5, "C"), t.Array(t.float16, 5, "A")
    f32c3, f32c4 = t.Array(t.float32, 3, "C"), t.Array(t.float32, 4, "C")

    def decode_sig(cache, q):
        return (
            cache,
            cache,
            q,
            t.Array(t.int32, 2, "C"),
            t.Array(t.int32, 1, "C"),
            t.float32,
            t.int32,
            t.int32,
            t.int32,
            f32c4,
            f32c3,
            f32c3,
        )

    write_sig = (
        f16c5,
        t.Array(t.float16, 3, "C"),
        t.Array(t.float16, 3, "C"),
        t.Array(t.int64, 1, "C"),
    )
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
        kern = make_decode_kernel(
            loaders, head_dim, group, np.dtype(dtype.name), block_size, warps=warps, paged=paged
        )
        specs.append(
            (
                f"paged_decode[{name}]",
                kern.py_func,
                decode_sig(cache, t.Array(dtype, 3, "C")),
                threads,
            )
        )
    from .fast.decode_tc import make_tc_decode_kernel, tc_geometry  # path="tensor", as on a GPU

    for group in (4, 8, 16):
        kern = make_tc_decode_kernel(BLOCK_MAJOR, 128, group, 16)
        specs.append(
            (
                f"paged_decode_tc[float16,G={group},D=128]",
                kern.py_func,
                decode_sig(f16c5, t.Array(t.float16, 3, "C")),
                32 * tc_geometry(128, group)["warps"],
            )
        )
    # The chapter 3.7 labs: concurrent allocators and the layout/alignment decode variants.
    from . import alloc, labs

    for package in (alloc, labs):
        prefix = package.__name__.rsplit(".", 1)[-1]
        specs += [(f"{prefix}.{name}", *rest) for name, *rest in package.PTX_KERNELS]
    from .prefill import make_prefill_kernel  # paged prefill: (NT=128, T, QT) as on a GPU

    i32 = t.Array(t.int32, 1, "C")
    for dtype, group, head_dim, tile, cache in (
        (t.float16, 8, 128, 32, f16c5),
        (t.float16, 1, 128, 32, f16c5),
        (t.float32, 4, 80, 32, t.Array(t.float32, 5, "C")),
    ):
        kern = make_prefill_kernel(
            head_dim,
            group,
            128,
            tile,
            max(1, 16 // group),
            loaders=BLOCK_MAJOR,
            dtype=np.dtype(dtype.name),
        )
        specs.append(
            (
                f"paged_prefill[{dtype.name},G={group},D={head_dim}]",
                kern.py_func,
                (
                    cache,
                    t.Array(dtype, 3, "C"),
                    t.Array(t.int32, 2, "C"),
                    i32,
                    i32,
                    i32,
                    i32,
                    t.int32,
                    t.float32,
                    t.int32,
                    t.int32,
                    t.int32,
                    f32c3,
                ),
                128,
            )
        )
    from .fast.prefill_tc import launch_config, make_prefill_tc_kernel  # the GPU's shapes

    prefill_sig = (
        f16c5,
        t.Array(t.float16, 3, "C"),
        t.Array(t.int32, 2, "C"),
        i32,
        i32,
        i32,
        i32,
        t.int32,
        t.float32,
        t.int32,
        t.int32,
        t.int32,
        f32c3,
    )
    for group, head_dim in ((8, 128), (1, 128), (8, 256), (4, 80)):
        warps, tile, q_regs, o_split = launch_config(head_dim)
        kern = make_prefill_tc_kernel(head_dim, group, warps, tile, 16, q_regs, o_split)
        specs.append(
            (
                f"paged_prefill_tc[float16,G={group},D={head_dim}]",
                kern.py_func,
                prefill_sig,
                32 * warps,
            )
        )
    from .fast.prefill_wgmma import make_prefill_wgmma_kernel  # path="wgmma": sm_90a only

    specs.append(
        (
            "paged_prefill_wgmma[float16,G=8,D=128]",
            make_prefill_wgmma_kernel(128, 8, 64, 16).py_func,
            prefill_sig,
            128,
            {"sm_90": "sm_90a"},
        )
    )
    return specs


def ladder_specs():
    """(name, python function, signature, threads) for every rung of `cuda_kernels.ladder`,
    at the ladder's report case (float16, G = 4, head_dim 128, 16-token blocks)."""
    from .ladder import RUNGS

    return [(f"rung{i}.{rung.name}", *rung.ptx_spec()) for i, rung in enumerate(RUNGS, 1)]


def ladder_rows(rows: list[dict]) -> list[dict]:
    """Each rung's row gains cache_reads (`Rung.reads` at the report case's group) and
    sass_per_cache_byte = sass_per_kv_byte x cache_reads: the loop's issue slots per byte of
    cache one decode step needs, which is what GQA improves (it loads each byte once for
    the group; sass_per_kv_byte alone counts per byte loaded)."""
    from .ladder import RUNGS
    from .ladder.launch import REPORT_GROUP

    for row in rows:
        rung = RUNGS[int(row["kernel"].split(".")[0][4:]) - 1]
        row["cache_reads"] = rung.reads(REPORT_GROUP)
        per_byte = row.get("sass_per_kv_byte")
        row["sass_per_cache_byte"] = (
            None if per_byte is None else round(per_byte * row["cache_reads"], 4)
        )
    return rows


def targets(spec: tuple, archs) -> list[tuple[str, str]]:
    """[(arch, target)] a spec is compiled for: every arch as itself, or, for a spec whose
    5th element maps archs to targets (wgmma needs sm_90a), only the archs it names."""
    only = spec[4] if len(spec) > 4 else None
    return [(a, a) for a in archs] if only is None else [(a, only[a]) for a in archs if a in only]


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


def _one(
    ptxas: str,
    name: str,
    func,
    sig,
    threads: int,
    arch: str,
    tmp: Path,
    ptx_dir: Path | None,
    target: str | None = None,
    compile_only: bool = False,
) -> dict:
    """One row; `target` is the ptxas arch when it differs from `arch` (sm_90a: cc
    (9, 0, "a"), whose PTX says .target sm_90a); occupancy uses `arch`'s limits.
    compile_only: just {kernel, arch, compile_s, compile_cpu_s}, the wall and CPU seconds
    numba's compile to PTX took (typing, lowering, NVVM: what a launch's JIT pays before the
    driver's ptxas)."""
    from numba.cuda import compile_ptx

    base, target = arch, target or arch
    cc = (int(target[3]), int(target[4]), *([target[5:]] if target[5:] else []))
    began, cpu = time.perf_counter(), time.process_time()
    ptx, _ = compile_ptx(func, sig, cc=cc)
    if compile_only:  # wall seconds, and this process's CPU seconds (what load cannot inflate)
        return {
            "kernel": name,
            "arch": target,
            "compile_s": round(time.perf_counter() - began, 2),
            "compile_cpu_s": round(time.process_time() - cpu, 2),
        }
    arch = target
    stem = f"{re.sub(r'[^A-Za-z0-9]+', '_', name).strip('_')}_{arch}"
    path = tmp / f"{stem}.ptx"
    path.write_text(ptx)
    if ptx_dir is not None:
        (ptx_dir / path.name).write_text(ptx)
    cubin = tmp / f"{stem}.cubin"
    done = _run(
        [ptxas, "-v", f"-arch={arch}", str(path), "-o", str(cubin)], f"ptxas on {name} for {arch}"
    )
    row = {
        "kernel": name,
        "arch": arch,
        "threads": threads,
        **parse_ptxas(done.stderr),
        **disasm.ptx_stats(ptx),
    }
    sass = disassemble(cubin)
    row.update(
        disasm.steady_loop(disasm.parse_sass(sass)) if sass is not None else disasm.steady_loop([])
    )
    row.update(disasm.occupancy(base, row["registers"], row["shared_bytes"], threads))
    case = prefill_case(name, func, row["ctas_per_sm"])
    row.update(case)
    row.update(roofline.model(row, case.get("reuse", 1.0), expects_flops=bool(case)))
    row["path"] = path_of(name)
    return row


_NAME_FIELD = re.compile(r"\b([A-Z])=(\d+)")


def prefill_case(kernel: str, func, ctas_per_sm: int) -> dict:
    """For a prefill kernel, its K/V reuse at roofline.HEADLINE: G and D from the row's
    name (`...[dtype,G=g,D=d]`), the query tokens per CTA (QT) and the K/V tile (T) from
    the kernel's compile-time constants (its Python closure); {} for other kernels, and
    reuse None (so no bound, rather than a wrong one) when those are not found."""
    if not kernel.startswith("paged_prefill"):
        return {}
    fields = {k: int(v) for k, v in _NAME_FIELD.findall(kernel)}
    consts = dict(
        zip(
            func.__code__.co_freevars,
            (c.cell_contents for c in func.__closure__ or ()),
            strict=True,
        )
    )
    if not {"G", "D"} <= set(fields) or not {"QT", "T"} <= set(consts):
        return {
            "reuse": None,
            "reuse_case": "needs G= and D= in the row's name and QT, T constants in its kernel",
        }
    itemsize = 4 if "float32" in kernel else 2
    return {
        "q_tile": consts["QT"],
        "kv_tile": consts["T"],
        **roofline.headline_reuse(
            fields["G"], consts["QT"], consts["T"], ctas_per_sm, fields["D"], itemsize
        ),
    }


def path_of(kernel: str) -> str | None:
    """The path a decode kernel serves ("tensor" / "cuda_core"), or "wgmma"."""
    if kernel.startswith("paged_decode_tc["):
        return "tensor"
    if kernel.startswith("paged_prefill_wgmma["):
        return "wgmma"
    return "cuda_core" if kernel.startswith("paged_decode[") else None


def git_commit() -> str | None:
    """The short commit of the checkout this module runs from (None outside git)."""
    root = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode:
        return None
    return done.stdout.strip() or None


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


def collect(
    archs,
    ptx_dir: Path | None = None,
    workers: int | None = None,
    ladder: bool = False,
    compile_only: bool = False,
    on_rows=None,
) -> list[dict]:
    """Every (kernel, arch) row, in kernel_specs() order then arch order. numba's compiler
    holds a process-wide lock, so the kernels are shared among `workers` forked processes
    (default: the CPU count, at most 4), each rebuilding the specs and compiling its
    share. A kernel's archs are compiled by the same worker, one after the other: the
    device functions it calls are compiled once per process (for the cc `_NoDevice`
    names) and reused by the second arch (the whole report: about 22% less CPU time).
    ladder: the rungs of `cuda_kernels.ladder` (`ladder_specs`) instead of the kernels.
    compile_only: rows of compile seconds only (`_one`); no ptxas needed.
    on_rows: called with each kernel's rows as soon as they are done (any order)."""
    _allow_device_functions_without_gpu()
    if find_ptxas() is None and not compile_only:
        raise RuntimeError("ptxas not found: install the ptx extra (nvidia-cuda-nvcc)")
    if ptx_dir is not None:
        ptx_dir.mkdir(parents=True, exist_ok=True)
    kernels = list(range(len(ladder_specs() if ladder else kernel_specs())))
    workers = max(1, min(workers or min(os.cpu_count() or 1, 4), len(kernels)))
    with tempfile.TemporaryDirectory() as tmp:
        args = [(i, tuple(archs), tmp, ptx_dir, ladder, compile_only) for i in kernels]
        per_kernel: list = [None] * len(args)
        if workers == 1:
            for i, a in enumerate(args):
                per_kernel[i] = _job(*a)
                if on_rows is not None:
                    on_rows(per_kernel[i])
        else:
            fork = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(workers, mp_context=fork) as pool:
                jobs = {pool.submit(_job, *a): i for i, a in enumerate(args)}
                for job in as_completed(jobs):
                    per_kernel[jobs[job]] = job.result()
                    if on_rows is not None:
                        on_rows(per_kernel[jobs[job]])
    return [row for rows in per_kernel for row in rows]


_SPECS: list = []


def _job(
    index: int,
    archs: tuple,
    tmp: str,
    ptx_dir: Path | None,
    ladder: bool = False,
    compile_only: bool = False,
) -> list[dict]:
    """The rows of kernel `index` for every arch, in a worker: the specs are rebuilt once
    per process (they hold closures, which do not pickle)."""
    if not _SPECS:
        _SPECS.extend(ladder_specs() if ladder else kernel_specs())
    spec = _SPECS[index]
    return [
        _one(find_ptxas(), *_with_threads(spec), arch, Path(tmp), ptx_dir, target, compile_only)
        for arch, target in targets(spec, archs)
    ]


def _with_threads(spec: tuple) -> tuple:
    """(name, func, sig[, threads[, targets]]) -> (name, func, sig, threads); 128 threads
    by default."""
    return (*spec[:3], spec[3] if len(spec) > 3 else DEFAULT_THREADS)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cuda_kernels.report", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the README's decode/prefill table (report_format.py)",
    )
    parser.add_argument("--arch", action="append", choices=ARCHS, help="repeatable; default: both")
    parser.add_argument("--ptx-dir", type=Path, help="also write each kernel's PTX here")
    parser.add_argument(
        "--ladder",
        action="store_true",
        help="the rungs of cuda_kernels.ladder instead of the kernels",
    )
    parser.add_argument(
        "--compile-only",
        action="store_true",
        help="only time each kernel's compile to PTX: JSON lines, first {planned: [names]}, "
        "then one row per kernel and arch as each is done",
    )
    parser.add_argument("--workers", type=int, help="compiling processes (default: CPUs, <= 4)")
    args = parser.parse_args(argv)
    if _backend.backend() != "gpu":  # compile_ptx needs the real CUDA target: re-run
        env = dict(os.environ, PAGEDSIM_CUDA="gpu", NUMBA_ENABLE_CUDASIM="0")
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        argv = sys.argv[1:] if argv is None else argv
        return subprocess.run(
            [sys.executable, "-m", "cuda_kernels.report", *argv], env=env
        ).returncode
    began = time.perf_counter()
    on_rows = None
    if args.compile_only:  # streamed, so that a caller with a deadline keeps what is done
        _allow_device_functions_without_gpu()
        specs = ladder_specs() if args.ladder else kernel_specs()
        print(json.dumps({"planned": [spec[0] for spec in specs]}), flush=True)

        def on_rows(rows):
            for row in rows:
                print(json.dumps(row), flush=True)

    rows = collect(
        tuple(args.arch or ARCHS),
        args.ptx_dir,
        args.workers,
        ladder=args.ladder,
        compile_only=args.compile_only,
        on_rows=on_rows,
    )
    if args.ladder and not args.compile_only:
        rows = ladder_rows(rows)
    if args.compile_only:
        pass  # already printed, row by row
    elif args.json:
        print(json.dumps(rows, indent=1))
    elif args.markdown:
        print(markdown(rows, git_commit()))
    elif args.ladder:
        print(ladder_table(rows))
    else:
        print(table(rows))
        print(
            f"{len(rows)} kernels compiled in {time.perf_counter() - began:.1f} s; "
            f"spills: {sum(r['spill_bytes'] for r in rows)} bytes"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
