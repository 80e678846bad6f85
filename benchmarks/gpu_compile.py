"""The `compile` phase of the GPU run: how long numba takes to compile every kernel the run
launches, measured without a GPU (so the dry run states it too).

    seconds(workers=None) -> {"kernels", "compile_s_sum", "compile_cpu_s_sum", "wall_s",
                              "workers", "slowest"}

Each kernel of `python -m cuda_kernels.report` (the decode and prefill instances, the copy
kernels, the 3.7 labs) and every ladder rung is compiled to PTX for sm_90 by numba's real
CUDA target (typing, lowering, NVVM: the part of a JIT compile numba does; the driver's
ptxas step comes on top on a GPU), in `workers` processes at once, in a child process
(`report --compile-only`), which does not touch this process's CUDA context.
compile_s_sum is what one process would spend compiling them one after the other (what
the timed phases pay when they compile as they go, `phases.<name>.compile_s` on a GPU);
wall_s is what compiling them in parallel takes. compile_cpu_s_sum counts CPU seconds
instead: on a loaded machine the wall seconds grow with the load, the CPU seconds do not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _rows(extra: list[str], workers: int, timeout: float) -> list[dict]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_kernels.report",
            "--compile-only",
            "--arch",
            "sm_90",
            "--workers",
            str(workers),
            *extra,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode:
        raise RuntimeError(f"report --compile-only failed: {done.stderr[-600:]}")
    return json.loads(done.stdout)


def seconds(workers: int | None = None, timeout: float = 1800) -> dict:
    workers = workers or max(1, min(os.cpu_count() or 1, 16))
    began = time.perf_counter()
    rows = _rows([], workers, timeout) + _rows(["--ladder"], workers, timeout)
    wall = time.perf_counter() - began
    slowest = max(rows, key=lambda r: r["compile_s"])
    return {
        "kernels": len(rows),
        "compile_s_sum": round(sum(r["compile_s"] for r in rows), 1),
        "compile_cpu_s_sum": round(sum(r.get("compile_cpu_s", 0) for r in rows), 1),
        "wall_s": round(wall, 1),
        "workers": workers,
        "slowest": {"kernel": slowest["kernel"], "compile_s": slowest["compile_s"]},
        "rows": rows,
    }
