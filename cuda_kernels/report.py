"""Compile every kernel to PTX, SASS and ptxas resource use: the real-GPU gate, without a GPU.

    python -m cuda_kernels.report [--json | --markdown] [--arch sm_90 ...] [--ptx-dir DIR]
    python -m cuda_kernels.report --ladder        # the rungs of cuda_kernels.ladder
    python -m cuda_kernels.report --readme        # rewrite cuda_kernels/README.md's kernel table
    python -m cuda_kernels.report --ladder --readme   # ... and its ladder table
    python -m cuda_kernels.report --head-dims     # paged_prefill_tc at G=4, every HEAD_DIMS
    python -m cuda_kernels.report --json --kernels --ladder --head-dims   # all, one run

Per kernel (`kernel_specs`) and arch (default sm_80, sm_90; paged_prefill_wgmma: sm_90a
only): numba lowers once, NVVM gives PTX, `ptxas -v` registers, shared memory, stack and
spills, `nvdisasm -c` (or `cuobjdump -sass`) SASS; rows add `tools/disasm.py`'s counts and
`tools/roofline.py`'s H200 model. compile_ptx needs numba's real CUDA target but no GPU:
under the simulator this module re-runs itself with PAGEDSIM_CUDA=gpu. The CUDA binaries
come from the `ptx` extra's wheels or PATH; without a disassembler SASS fields are None.
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
import types
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from . import _backend
from .tools import disasm, roofline
from .tools.report_format import ladder_table, markdown, readme_block, replace_block, table

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


def kernel_specs():
    """(name, python function, signature[, threads]) for every kernel the package launches."""
    from . import alloc, labs

    specs = _memory_specs() + _decode_specs()
    # The chapter 3.7 labs: concurrent allocators and the layout/alignment decode variants.
    for package in (alloc, labs):
        prefix = package.__name__.rsplit(".", 1)[-1]
        specs += [(f"{prefix}.{name}", *rest) for name, *rest in package.PTX_KERNELS]
    return specs + _prefill_specs()


def _memory_specs() -> list:
    """The kernels that move KV: write_kv, copy_blocks, and the split-K merge."""
    from numba import types as t

    from .block_copy import copy_blocks_kernel, copy_blocks_vec
    from .merge import merge_partitions
    from .write_kv import write_kv_kernel, write_kv_vec

    f16c5, f16a5 = t.Array(t.float16, 5, "C"), t.Array(t.float16, 5, "A")
    f32c3, f32c4 = t.Array(t.float32, 3, "C"), t.Array(t.float32, 4, "C")
    f16c3 = t.Array(t.float16, 3, "C")
    write_sig = (f16c5, f16c3, f16c3, t.Array(t.int64, 1, "C"))
    pairs = t.Array(t.int32, 2, "C")
    return [
        ("write_kv[f16]", write_kv_kernel.py_func, write_sig),
        ("write_kv_vec[f16]", write_kv_vec.py_func, write_sig),
        ("copy_blocks[f16]", copy_blocks_kernel.py_func, (f16c5, f16c5, pairs)),
        ("copy_blocks_vec[f16]", copy_blocks_vec.py_func, (f16c5, f16c5, pairs, t.int64)),
        ("copy_blocks_vec[f16,pool-view]", copy_blocks_vec.py_func, (f16a5, f16a5, pairs, t.int64)),
        ("merge_partitions", merge_partitions.py_func, (f32c4, f32c3, f32c3, f32c3)),
    ]


def _decode_specs() -> list:
    """The decode kernel on the CUDA cores (several G, dtypes, layouts) and on the tensor cores."""
    import numpy as np
    from numba import types as t

    from .fast.decode import decode_sig, make_decode_kernel
    from .fast.decode_tc import make_tc_decode_kernel, tc_geometry  # path="tensor"
    from .labs.contiguous import CONTIGUOUS
    from .layout import BLOCK_MAJOR, BLOCK_MAJOR_SCALAR

    f16c5, f16a5 = t.Array(t.float16, 5, "C"), t.Array(t.float16, 5, "A")
    warps = 4  # the GPU launch configuration (`attention.launch_warps` on a GPU)
    # (name, loaders, numba dtype, group, head_dim, cache type, paged, block_size)
    decodes = [
        ("float16,G=8,D=128", BLOCK_MAJOR, t.float16, 8, 128, f16c5, True, 16),
        ("float16,G=4,D=128", BLOCK_MAJOR, t.float16, 4, 128, f16c5, True, 16),
        ("float16,G=1,D=128", BLOCK_MAJOR, t.float16, 1, 128, f16c5, True, 16),
        ("float32,G=4,D=80", BLOCK_MAJOR, t.float32, 4, 80, t.Array(t.float32, 5, "C"), True, 16),
        ("pool-view,G=4,D=128", BLOCK_MAJOR, t.float16, 4, 128, f16a5, True, 16),
        ("scalar,float16,G=8,D=128", BLOCK_MAJOR_SCALAR, t.float16, 8, 128, f16c5, True, 16),
        ("contiguous,float16,G=4,D=128", CONTIGUOUS, t.float16, 4, 128, f16c5, False, 4096),
    ]
    specs = []
    for name, loaders, dtype, group, head_dim, cache, paged, block_size in decodes:
        kern = make_decode_kernel(
            loaders, head_dim, group, np.dtype(dtype.name), block_size, warps=warps, paged=paged
        )
        sig = decode_sig(cache, cache, t.Array(dtype, 3, "C"))
        specs.append((f"paged_decode[{name}]", kern.py_func, sig, 32 * warps))
    for group in (4, 8, 16):
        kern = make_tc_decode_kernel(BLOCK_MAJOR, 128, group, 16)
        sig = decode_sig(f16c5, f16c5, t.Array(t.float16, 3, "C"))
        threads = 32 * tc_geometry(128, group)["warps"]
        specs.append((f"paged_decode_tc[float16,G={group},D=128]", kern.py_func, sig, threads))
    return specs


def _prefill_specs() -> list:
    """The paged prefill on the CUDA cores, the tensor cores, and wgmma (sm_90a only)."""
    import numpy as np
    from numba import types as t

    from .fast.prefill_wgmma import make_prefill_wgmma_kernel
    from .layout import BLOCK_MAJOR
    from .prefill import make_prefill_kernel  # (NT=128, T, QT) as on a GPU

    specs = []
    for dtype, group, head_dim in ((t.float16, 8, 128), (t.float16, 1, 128), (t.float32, 4, 80)):
        kern = make_prefill_kernel(
            head_dim, group, 128, 32, max(1, 16 // group), BLOCK_MAJOR, np.dtype(dtype.name)
        )
        name = f"paged_prefill[{dtype.name},G={group},D={head_dim}]"
        specs.append((name, kern.py_func, prefill_sig(dtype), 128))
    specs += [prefill_tc_spec(group, head_dim) for group, head_dim in PREFILL_TC_CASES]
    wgmma = make_prefill_wgmma_kernel(128, 8, 64, 16).py_func
    name = "paged_prefill_wgmma[float16,G=8,D=128]"
    return [*specs, (name, wgmma, prefill_sig(), 128, {"sm_90": "sm_90a"})]


# (G, head_dim) of the report's tensor-core prefill rows; the head-dim sweep adds G = 4 at
# every kind of head_dim `prefill_tc.launch_config` knows (208: O split with an odd share)
PREFILL_TC_CASES = ((8, 128), (1, 128), (8, 256), (4, 80))
HEAD_DIMS = (16, 64, 80, 128, 192, 208, 256)


def prefill_sig(dtype=None) -> tuple:
    """`prefill.make_prefill_kernel`'s arguments, cache and query of `dtype` (float16)."""
    from numba import types as t

    dtype, i32 = t.float16 if dtype is None else dtype, t.Array(t.int32, 1, "C")
    ints = (i32, i32, i32, i32, t.int32, t.float32, t.int32, t.int32, t.int32)
    cache_query_tables = (t.Array(dtype, 5, "C"), t.Array(dtype, 3, "C"), t.Array(t.int32, 2, "C"))
    return (*cache_query_tables, *ints, t.Array(t.float32, 3, "C"))


def prefill_tc_spec(group: int, head_dim: int) -> tuple:
    from .fast.prefill_tc import launch_config, make_prefill_tc_kernel

    warps, tile, q_regs, o_split = launch_config(head_dim)
    kern = make_prefill_tc_kernel(head_dim, group, warps, tile, 16, q_regs, o_split)
    name = f"paged_prefill_tc[float16,G={group},D={head_dim}]"
    return (name, kern.py_func, prefill_sig(), 32 * warps)


def head_dim_specs():
    return [prefill_tc_spec(4, head_dim) for head_dim in HEAD_DIMS]


def ladder_specs():
    from .ladder import RUNGS

    return [(f"rung{i}.{rung.name}", *rung.ptx_spec()) for i, rung in enumerate(RUNGS, 1)]


def kernel_source(kernel) -> list[str]:
    """The kernel's source lines, then those of each device step its closure holds."""
    import inspect

    func = kernel.py_func
    lines = inspect.getsource(func).splitlines()
    for cell in func.__closure__ or ():
        step = getattr(cell.cell_contents, "py_func", None)
        if step is not None:
            lines += inspect.getsource(step).splitlines()
    return lines


def kernel_diff(before, rung) -> dict:
    """{kernel_lines, lines_changed} (from the previous rung; None where not comparable)."""
    import difflib

    if rung.name == "production":
        return {"kernel_lines": None, "lines_changed": None}
    mine = kernel_source(rung.kernel)
    if before is None:
        return {"kernel_lines": len(mine), "lines_changed": None}
    theirs = kernel_source(before.kernel)
    diff = difflib.unified_diff(theirs, mine, lineterm="", n=0)
    changed = sum(1 for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))
    return {"kernel_lines": len(mine), "lines_changed": changed}


def ladder_rows(rows: list[dict]) -> list[dict]:
    """Each rung's row gains cache_reads (`Rung.reads`) and sass_per_cache_byte =
    sass_per_kv_byte x cache_reads: issue slots per byte of cache a decode step needs."""
    from .ladder import RUNGS
    from .ladder.launch import REPORT_GROUP

    for row in rows:
        index = int(row["kernel"].split(".")[0][4:]) - 1
        rung = RUNGS[index]
        row.update(kernel_diff(RUNGS[index - 1] if index else None, rung))
        row["cache_reads"] = rung.reads(REPORT_GROUP)
        per_byte = row.get("sass_per_kv_byte")
        row["sass_per_cache_byte"] = (
            None if per_byte is None else round(per_byte * row["cache_reads"], 4)
        )
        loads = row.get("loop_kv_loads") or 0  # LDG.128 and LDGSTS.128 of the K/V bytes
        row["ldg128"] = loads - (row.get("ldgsts") or 0) if row.get("loop_kv_bits") == 128 else 0
    return rows


def targets(spec: tuple, archs) -> list[tuple[str, str]]:
    """[(arch, target)]: every arch, or those a spec's 5th element maps (wgmma: sm_90a)."""
    only = spec[4] if len(spec) > 4 else None
    return [(a, a) for a in archs] if only is None else [(a, only[a]) for a in archs if a in only]


def parse_ptxas(text: str) -> dict:
    """ptxas -v output -> one row: over the kernel and its non-inlined device functions,
    the most registers and shared memory any one uses, stack and spill bytes summed."""
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


def lower(func, sig, cc: tuple):
    """numba's lowering of a kernel, as `compile_ptx` does before NVVM. It reads the cc only
    for an f64 atomic add and a fastmath tanh, so one lowering serves sm_80, sm_90 and sm_90a
    (tests/kernels/test_ptx_report.py checks the PTX)."""
    from numba.cuda.compiler import _compile_pyfunc_with_fixup

    lib, _ = _compile_pyfunc_with_fixup(func, sig, device=False, abi="numba", cc=cc)
    return lib


def ptx_for(lib, target: str) -> str:
    (ptx,) = lib.get_asm_strs(cc=_cc(target))
    return ptx


def _cc(target: str) -> tuple:
    """ "sm_90" -> (9, 0); "sm_90a" -> (9, 0, "a")."""
    return (int(target[3]), int(target[4]), *([target[5:]] if target[5:] else []))


def _stem(name: str, arch: str) -> str:
    return f"{re.sub(r'[^A-Za-z0-9]+', '_', name).strip('_')}_{arch}"


def build(ptxas: str, func, sig, targets_: list[str], tmp: Path) -> list[dict]:
    """Per target: {ptx, ptxas (ptxas -v's report), sass (None without a disassembler)}."""
    lib = lower(func, sig, _cc(targets_[0]))
    out = []
    for target in targets_:
        ptx = ptx_for(lib, target)
        handle, name = tempfile.mkstemp(suffix=f"_{target}.ptx", dir=tmp)
        os.close(handle)
        path = Path(name)
        path.write_text(ptx)
        cubin = path.with_suffix(".cubin")
        done = _run(
            [ptxas, "-v", f"-arch={target}", str(path), "-o", str(cubin)],
            f"ptxas on {func.__qualname__} for {target}",
        )
        out.append({"ptx": ptx, "ptxas": done.stderr, "sass": disassemble(cubin)})
    return out


def row(name: str, func, threads: int, arch: str, target: str, built: dict) -> dict:
    """One report row from `build`'s products for `target`; occupancy at `arch`'s limits."""
    sass = built["sass"]
    row = {"kernel": name, "arch": target, "threads": threads, **parse_ptxas(built["ptxas"])}
    row.update(disasm.ptx_stats(built["ptx"]))
    row.update(disasm.steady_loop(disasm.parse_sass(sass) if sass is not None else []))
    row.update(disasm.occupancy(arch, row["registers"], row["shared_bytes"], threads))
    case = prefill_case(name, func, row["ctas_per_sm"])
    row.update(case)
    row.update(roofline.model(row, case.get("reuse", 1.0), expects_flops=bool(case)))
    row["path"] = next((p for k, p in PATH_PREFIXES.items() if name.startswith(k)), None)
    return row


def compile_seconds(name: str, func, sig, target: str, ptxas: str | None = None) -> dict:
    """Wall and CPU seconds of compile_ptx, then of `ptxas` on its PTX (None without it)."""
    from numba.cuda import compile_ptx

    began, cpu = time.perf_counter(), time.process_time()
    ptx, _ = compile_ptx(func, sig, cc=_cc(target))
    out = {
        "kernel": name,
        "arch": target,
        "compile_s": round(time.perf_counter() - began, 2),
        "compile_cpu_s": round(time.process_time() - cpu, 2),
        "ptxas_s": None,
        "ptxas_cpu_s": None,
    }
    if ptxas is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "k.ptx"
            path.write_text(ptx)
            began, before = time.perf_counter(), os.times()
            _run([ptxas, f"-arch={target}", str(path), "-o", str(path.with_suffix(".cubin"))], name)
            after = os.times()
        out["ptxas_s"] = round(time.perf_counter() - began, 2)
        children = after.children_user + after.children_system  # ptxas's CPU time
        out["ptxas_cpu_s"] = round(children - before.children_user - before.children_system, 2)
    return out


_NAME_FIELD = re.compile(r"\b([A-Z])=(\d+)")


def prefill_case(kernel: str, func, ctas_per_sm: int) -> dict:
    """A prefill kernel's K/V reuse at roofline.HEADLINE (G, D from the name, QT, T from its
    closure or its device functions'; reuse None when not found); {} for other kernels."""
    if not kernel.startswith("paged_prefill"):
        return {}
    fields = {k: int(v) for k, v in _NAME_FIELD.findall(kernel)}
    consts = _closed_over(func)
    for f in list(consts.values()):  # QT is the work map's (prefill_work.make_work's closure)
        consts = {**_closed_over(getattr(f, "py_func", f)), **consts}
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


def _closed_over(func) -> dict:
    """The names a function closes over, with their values ({} for anything else)."""
    code, cells = getattr(func, "__code__", None), getattr(func, "__closure__", None) or ()
    if code is None:
        return {}
    return dict(zip(code.co_freevars, (c.cell_contents for c in cells), strict=True))


# the path a kernel serves, by name prefix: "tensor" / "cuda_core" (decode), "wgmma"
PATH_PREFIXES = {
    "paged_decode_tc[": "tensor",
    "paged_prefill_wgmma[": "wgmma",
    "paged_decode[": "cuda_core",
}


class _NoDevice:
    """`get_current_device()` without a GPU: a device function's dispatcher reads its cc."""

    compute_capability = (8, 0)


def _allow_device_functions_without_gpu() -> None:
    from numba import cuda
    from numba.cuda import dispatcher

    if not cuda.is_available():
        dispatcher.get_current_device = _NoDevice


def compile_key(spec: tuple, archs) -> tuple | None:
    """(fingerprint, signature, targets), or None: specs with equal keys are one compile
    (paged_decode[float16,G=4,D=128] is also labs.decode_fused and the ladder's rung 8)."""
    from numba.core import sigutils

    found = fingerprint(spec[1])
    if found is None:
        return None
    args, _ = sigutils.normalize_signature(spec[2])  # a tuple of types or "void(...)"
    return (found, tuple(args), tuple(t for _, t in targets(spec, archs)))


def fingerprint(obj, depth: int = 0):
    """A hashable stand-in for what numba reads of a function (code, globals by identity,
    defaults, closure values, taken apart recursively); None for anything unhashable."""
    from numba.cuda.dispatcher import CUDADispatcher

    if depth > 20:
        return None
    if isinstance(obj, CUDADispatcher):
        inner = fingerprint(obj.py_func, depth + 1)
        options = fingerprint(tuple(sorted(obj.targetoptions.items())), depth + 1)
        return None if inner is None or options is None else ("jit", inner, options)
    if isinstance(obj, types.FunctionType):
        try:
            cells = tuple(c.cell_contents for c in obj.__closure__ or ())
        except ValueError:  # an empty cell
            return None
        parts = [fingerprint(x, depth + 1) for x in (obj.__defaults__, obj.__kwdefaults__, cells)]
        if any(x is None for x in parts[2:]) or (obj.__defaults__ and parts[0] is None):
            return None
        return ("fn", obj.__code__, id(obj.__globals__), *parts)
    if isinstance(obj, (tuple, list)):  # a list: a dispatcher's targetoptions["extensions"]
        parts = [fingerprint(x, depth + 1) for x in obj]
        return None if any(x is None for x in parts) else (type(obj), *parts)
    if obj is None:
        return ("none",)
    try:
        hash(obj)
    except TypeError:
        return None
    return (type(obj), obj)


def collect(
    specs: list,
    archs,
    ptx_dir: Path | None = None,
    workers: int | None = None,
    compile_only: bool = False,
    on_rows=None,
) -> list[dict]:
    """Every (spec, arch) row, specs with one `compile_key` compiled once, in `workers`
    forked processes (numba's compiler lock; closures do not pickle, so they inherit the
    specs). compile_only: `compile_seconds` rows. on_rows: called with each spec's rows."""
    _allow_device_functions_without_gpu()
    ptxas = find_tool("ptxas")
    if ptxas is None and not compile_only:
        raise RuntimeError("ptxas not found: install the ptx extra (nvidia-cuda-nvcc)")
    if ptx_dir is not None:
        ptx_dir.mkdir(parents=True, exist_ok=True)
    archs = tuple(archs)
    first: dict = {}  # compile key -> the index of the spec compiled for it
    same = [
        i if compile_only or key is None else first.setdefault(key, i)
        for i, key in enumerate(compile_key(spec, archs) for spec in specs)
    ]
    jobs = sorted(set(same))
    per_spec: list = [None] * len(specs)

    def done(job: int, products: list) -> None:
        for i in (i for i, j in enumerate(same) if j == job):
            name, func, _, threads = _with_threads(specs[i])
            if compile_only:
                per_spec[i] = [dict(p, kernel=name) for p in products]
            else:
                per_spec[i] = []
                for (arch, target), built in zip(targets(specs[i], archs), products, strict=True):
                    per_spec[i].append(row(name, func, threads, arch, target, built))
                    if ptx_dir is not None:
                        (ptx_dir / f"{_stem(name, target)}.ptx").write_text(built["ptx"])
            if on_rows is not None:
                on_rows(per_spec[i])

    workers = max(1, min(workers or min(os.cpu_count() or 1, 4), len(jobs)))
    _SPECS[:] = specs
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if workers == 1:
                for job in jobs:
                    done(job, _job(job, archs, ptxas, tmp, compile_only))
            else:
                fork = multiprocessing.get_context("fork")
                with ProcessPoolExecutor(workers, mp_context=fork) as pool:
                    futures = {
                        pool.submit(_job, job, archs, ptxas, tmp, compile_only): job for job in jobs
                    }
                    for future in as_completed(futures):
                        done(futures[future], future.result())
    finally:
        _SPECS.clear()
    return [row for rows in per_spec for row in rows]


_SPECS: list = []  # collect's specs, which its forked workers inherit


def _job(index: int, archs: tuple, ptxas: str | None, tmp: str, compile_only: bool) -> list:
    name, func, sig, _ = _with_threads(_SPECS[index])
    targets_ = [target for _, target in targets(_SPECS[index], archs)]
    if compile_only:
        return [compile_seconds(name, func, sig, target, ptxas) for target in targets_]
    assert ptxas is not None
    return build(ptxas, func, sig, targets_, Path(tmp)) if targets_ else []


def _with_threads(spec: tuple) -> tuple:
    return (*spec[:3], spec[3] if len(spec) > 3 else DEFAULT_THREADS)


SPEC_SETS = {"kernels": kernel_specs, "ladder": ladder_specs, "head_dims": head_dim_specs}


FLAGS = {  # the on/off options: flag -> its help
    "--json": "print a JSON list instead of a table",
    "--markdown": "print the README's decode/prefill table (report_format.py)",
    "--kernels": "the kernels (the default unless --ladder or --head-dims is given)",
    "--ladder": "the rungs of cuda_kernels.ladder instead of the kernels",
    "--head-dims": "the tensor-core prefill at G=4 for every kind of head_dim instead of the "
    "kernels",
    "--compile-only": "only time each kernel's compile to PTX: JSON lines, first {planned: "
    "[names]}, then one row per kernel and arch as each is done",
    "--readme": "rewrite cuda_kernels/README.md's kernel table (with --ladder: its ladder "
    "table) from the sm_90 rows",
}


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cuda_kernels.report", description=__doc__.split("\n")[0]
    )
    for flag, text in FLAGS.items():
        parser.add_argument(flag, action="store_true", help=text)
    parser.add_argument("--arch", action="append", choices=ARCHS, help="repeatable; default: both")
    parser.add_argument("--ptx-dir", type=Path, help="also write each kernel's PTX here")
    parser.add_argument("--workers", type=int, help="compiling processes (default: CPUs, <= 4)")
    return parser


def main(argv=None) -> int:
    args = (cli := parser()).parse_args(argv)
    sets = [s for s in SPEC_SETS if getattr(args, s)] or ["kernels"]
    if len(sets) > 1 and not (args.json or args.compile_only):
        cli.error("several of --kernels, --ladder and --head-dims need --json or --compile-only")
    if args.readme and sets not in (["kernels"], ["ladder"]):
        cli.error("--readme rewrites the kernel table, or with --ladder the ladder table")
    if _backend.backend() != "gpu":  # compile_ptx needs the real CUDA target: re-run
        env = dict(os.environ, PAGEDSIM_CUDA="gpu", NUMBA_ENABLE_CUDASIM="0")
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        argv = sys.argv[1:] if argv is None else argv
        return subprocess.run(
            [sys.executable, "-m", "cuda_kernels.report", *argv], env=env
        ).returncode
    began = time.perf_counter()
    _allow_device_functions_without_gpu()
    per_set = {name: SPEC_SETS[name]() for name in sets}  # JSON: the sets in this order
    specs = [spec for name in sets for spec in per_set[name]]
    on_rows = None
    if args.compile_only:  # streamed, so that a caller with a deadline keeps what is done
        print(json.dumps({"planned": [spec[0] for spec in specs]}), flush=True)

        def on_rows(rows):
            for row in rows:
                print(json.dumps(row), flush=True)

    archs, only = tuple(args.arch or ARCHS), args.compile_only
    rows = collect(specs, archs, args.ptx_dir, args.workers, compile_only=only, on_rows=on_rows)
    if "ladder" in sets and not args.compile_only:
        names = {spec[0] for spec in per_set["ladder"]}
        ladder_rows([r for r in rows if r["kernel"] in names])
    if not args.compile_only:  # else already printed, row by row
        _print(rows, args, sets, began)
    return 0


def _print(rows: list[dict], args: argparse.Namespace, sets: list[str], began: float) -> None:
    if args.json:
        print(json.dumps(rows, indent=1))
    elif args.markdown:
        print(markdown(rows))
    elif args.readme and sets in (["kernels"], ["ladder"]):
        name = "ladder" if sets == ["ladder"] else "kernel"
        readme = Path(__file__).resolve().parent / "README.md"
        readme.write_text(replace_block(readme.read_text(), name, readme_block(name, rows)))
        print(f"rewrote the {name} table of {readme}")
    elif sets == ["ladder"]:
        print(ladder_table(rows))
    else:
        print(table(rows))
        print(
            f"{len(rows)} kernels compiled in {time.perf_counter() - began:.1f} s; "
            f"spills: {sum(r['spill_bytes'] for r in rows)} bytes"
        )


if __name__ == "__main__":
    sys.exit(main())
