"""Backend choice: made before numba.cuda is imported, announced once, forceable."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cuda_kernels

ROOT = Path(__file__).resolve().parents[2]


def run(code: str, **env_changes):
    env = {
        k: v for k, v in os.environ.items() if k not in ("PAGEDSIM_CUDA", "NUMBA_ENABLE_CUDASIM")
    }
    env.update(env_changes, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_this_machine_without_a_gpu_runs_the_simulator():
    assert cuda_kernels.backend() in ("gpu", "simulator")
    if not Path("/dev/nvidiactl").exists():
        assert cuda_kernels.backend() == "simulator"


@pytest.mark.slow
def test_the_environment_variable_forces_the_simulator_quietly_and_numba_follows():
    done = run(
        "import cuda_kernels; from numba.cuda.core import config; "
        "print(cuda_kernels.backend(), config.ENABLE_CUDASIM)",
        PAGEDSIM_CUDA="simulator",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["simulator", "1"]
    assert "simulator" not in done.stderr  # forced: no fallback notice


def test_a_bad_mode_in_the_environment_is_refused():
    done = run("import cuda_kernels", PAGEDSIM_CUDA="tpu")
    assert done.returncode != 0 and "PAGEDSIM_CUDA must be 'gpu' or 'simulator'" in done.stderr


def test_importing_numba_cuda_first_in_another_mode_is_reported_not_hidden():
    done = run(
        "import os; os.environ['NUMBA_ENABLE_CUDASIM'] = '1'; import numba.cuda; "
        "os.environ['PAGEDSIM_CUDA'] = 'gpu'; import cuda_kernels; print(cuda_kernels.backend())"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "simulator"
    assert "already imported in simulator mode" in done.stderr


def test_the_gpu_benchmark_refuses_to_time_anything_on_the_simulator():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_attention.py")],
        env=dict(os.environ, PYTHONPATH=str(ROOT), PAGEDSIM_CUDA="simulator"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
    )
    assert done.returncode == 2
    assert "no GPU" in done.stderr and "--dry-run" in done.stderr


@pytest.mark.slow
def test_the_gpu_benchmarks_dry_run_checks_every_kernel_and_reports_no_timing(tmp_path):
    """The one command meant for a GPU must not rot where no GPU runs it: its tiny dry run
    goes through every step, and every on-device correctness check passes. Its compile phase
    (every kernel compiled to PTX: tens of minutes on two cores) is left to the dry run a
    person starts (`gpu_attention.py --dry-run --phases compile`), labs to their own test, and
    the ladder's rungs to tests/kernels/test_ladder.py (each against the reference)."""
    phases = ["copy", "prefill", "decode", "correctness", "copies"]
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_attention.py"),
            "--dry-run",
            "--phases",
            ",".join(phases),
            "--out",
            str(tmp_path),
        ],
        env=dict(os.environ, PYTHONPATH=str(ROOT), PAGEDSIM_CUDA="simulator"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert (tmp_path / "r.md").exists() and "| target |" in (tmp_path / "log.txt").read_text()
    assert report["backend"] == "simulator" and not report["timings_valid"]
    assert len(report["correctness"]) == 16 and all(report["correctness"].values())
    assert report["cases"] and all(case["median_ms"] is None for case in report["cases"])
    assert all(case["checked_on_device"] for case in report["cases"])
    # every case of the dry grid ran (G = 2 in float16, both paths; G = 8 in float32)
    assert report["cases_left_out"] == []
    assert {(c["group"], c["dtype"], c["path"]) for c in report["cases"] if c["path"]} == {
        (2, "float16", "cuda_core"),
        (2, "float16", "tensor"),
        (8, "float32", "cuda_core"),
    }
    (row,) = report["prefill"]
    assert (
        row["kernel"] == "paged_prefill" and row["checked_on_device"] and row["median_ms"] is None
    )
    # 4 D * heads * batch * (prefix + causal) pairs, for DRY_PREFILL = (1, 6, 5, 2, 1, fp16)
    assert row["flop"] == 4 * 16 * 2 * 1 * (6 * 5 + 6 * 7 // 2)


def test_the_simulator_stand_ins_are_installed_only_on_the_simulator_backend():
    probe = (
        "import sys, cuda_kernels.primitives; "
        "print('cuda_kernels.sim.simulator' in sys.modules, "
        "'cuda_kernels.gpu.intrinsics' in sys.modules)"
    )
    simulated = run(probe, PAGEDSIM_CUDA="simulator")
    assert simulated.returncode == 0, simulated.stderr
    assert simulated.stdout.split() == ["True", "False"]
    real = run(probe, PAGEDSIM_CUDA="gpu")  # compiling needs no GPU; the stand-ins stay out
    assert real.returncode == 0, real.stderr
    assert real.stdout.split() == ["False", "True"]
