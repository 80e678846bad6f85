"""What the PTX tests share: a probe compiled on the real CUDA target (`run_gpu_probe`), and
one `python -m cuda_kernels.report --json --ptx-dir DIR` run for the whole test session,
whose rows every PTX test reads: the kernels' gate, the ladder, the tensor-core prefill's
head-dim sweep and the wgmma prefill's row. One run compiles a kernel that two of them
check once (rung 11 is paged_decode_tc[float16,G=4,D=128], the sweep's D=80 is the report's
row; `report.compile_key`) and lowers each kernel once for both archs.

A test names the spec sets it reads with `@uses(...)`; the run compiles the sets of every
selected test that declares some, so `pytest -k ladder` compiles the ladder alone. Under
pytest-xdist the workers are separate processes: the run's output is a file in their
common base directory, written by the first worker to get its lock, which the others
wait for and read (JSON, from our own report).

A probe is Python source run in a fresh interpreter with PAGEDSIM_CUDA=gpu (numba's real
CUDA target: compiling needs no GPU) that prints its result as JSON on its last line.
"""

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETS = ("kernels", "ladder", "head_dims")  # report.SPEC_SETS, in the report's order
_RUNS: dict = {}  # this process's runs, by their sets


@dataclass(frozen=True)
class Run:
    sets: tuple  # the spec sets compiled, in SETS order
    returncode: int
    stderr: str  # the tail of the report's stderr
    rows: list  # the report's JSON rows (none when it failed)
    ptx_dir: Path  # DIR/<kernel>_<arch>.ptx for every row

    def of(self, names) -> list:
        """The rows of the kernels named, in run order, one per (kernel, arch)."""
        names, seen, out = set(names), set(), []
        for row in self.rows:
            key = (row["kernel"], row["arch"])
            if row["kernel"] in names and key not in seen:
                seen.add(key)
                out.append(row)
        return out


def run_gpu_probe(code: str):
    """Run `code` on the real CUDA target in a subprocess; the JSON of its last stdout line.
    Fails the test, with the tail of its stderr, when the probe fails."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONPATH=str(ROOT), PAGEDSIM_CUDA="gpu", NUMBA_ENABLE_CUDASIM="0"),
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def uses(*sets: str):
    """Mark a test as reading the report rows of `sets`."""
    assert set(sets) <= set(SETS), sets

    def mark(test):
        test.report_sets = sets
        return test

    return mark


def report(request, tmp_path_factory) -> Run:
    """The session's report run (started by the first test that asks, in any worker)."""
    assert getattr(request.function, "report_sets", None), "decorate the test with @uses(...)"
    wanted = _wanted(request.session.items)
    sets = tuple(s for s in SETS if s in wanted)
    if sets in _RUNS:
        return _RUNS[sets]
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's directory, which every worker's lies in
    out = base / f"ptx_report_{'_'.join(sets)}"
    out.mkdir(exist_ok=True)
    result = out / "result.json"
    with open(out / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the second worker waits here for the first
        if not result.exists():
            done = subprocess.run(
                [sys.executable, "-m", "cuda_kernels.report", "--json", "--ptx-dir"]
                + [str(out / "ptx"), *(f"--{s.replace('_', '-')}" for s in sets)],
                cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
                capture_output=True,
                text=True,
                timeout=3600,
            )
            rows = json.loads(done.stdout) if done.returncode == 0 else []
            part = result.with_suffix(".part")
            part.write_text(
                json.dumps(
                    {"returncode": done.returncode, "stderr": done.stderr[-6000:], "rows": rows}
                )
            )
            part.replace(result)
        saved = json.loads(result.read_text())
    _RUNS[sets] = Run(sets, saved["returncode"], saved["stderr"], saved["rows"], out / "ptx")
    return _RUNS[sets]


def _wanted(items) -> set:
    wanted: set = set()
    for item in items:
        wanted.update(getattr(getattr(item, "function", None), "report_sets", ()))
    return wanted
