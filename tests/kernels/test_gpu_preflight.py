"""The GPU run's preflight and its offline wheels, without a GPU: the preflight reads
versions without importing numba, stops in one line naming the package, its version and
the fix when one is older than this checkout needs (faked with PAGEDSIM_FAKE_VERSIONS),
and gpu_attention.py stops there before `import cuda_kernels` could fail."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import fetch_wheels  # noqa: E402
import gpu_preflight as pf  # noqa: E402


def run(script, *args, **env):
    clean = {k: v for k, v in os.environ.items() if k != "PAGEDSIM_FAKE_VERSIONS"}
    clean["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_bounds_are_pyprojects_and_llvmlite_follows_numba():
    text = (ROOT / "pyproject.toml").read_text()
    bounds = pf.needs(numba_version="0.68.1")
    assert f'"numba>={bounds["numba"]}"' in text and f'"numba-cuda>={bounds["numba-cuda"]}"' in text
    assert bounds["llvmlite"] == "0.50"


@pytest.mark.parametrize(
    "have, ok",
    [("0.20.1", False), ("0.29.9", False), ("0.30.0", True), ("1.0", True), (None, False)],
)
def test_a_package_older_than_its_bound_or_missing_is_one_problem(have, ok):
    found = {"numba": "0.68.1", "numba-cuda": have, "llvmlite": "0.50.0"}
    lines = pf.problems(found, {"numba": "0.68", "numba-cuda": "0.30", "llvmlite": "0.50"})
    assert (lines == []) == ok
    if not ok:
        assert len(lines) == 1 and "numba-cuda" in lines[0] and "0.30" in lines[0]


def test_an_old_numba_cuda_stops_the_preflight_in_one_line_naming_version_and_fix():
    done = run("gpu_preflight.py", PAGEDSIM_FAKE_VERSIONS="numba-cuda=0.20.1")
    assert done.returncode == pf.EXIT_TOO_OLD
    stop = [line for line in done.stdout.splitlines() if "older than" in line]
    assert len(stop) == 1, done.stdout
    assert "numba-cuda 0.20.1" in stop[0] and "--no-index" in stop[0]
    assert "benchmarks/wheels" in stop[0]


def test_the_preflight_prints_every_version_and_passes_on_this_environment():
    done = run("gpu_preflight.py")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in (
        "numba",
        "numba-cuda",
        "llvmlite",
        "torch",
        "driver",
        "compute_capability",
        "cuda_runtime",
        "device",
    ):
        assert f" {name} " in done.stdout, name


def test_the_gpu_run_stops_at_the_preflight_before_importing_cuda_kernels():
    done = run(
        "gpu_attention.py",
        "--dry-run",
        "--phases",
        "copy",
        PAGEDSIM_FAKE_VERSIONS="numba-cuda=0.20.1",
    )
    assert done.returncode == pf.EXIT_TOO_OLD
    assert "older than" in done.stderr and "Traceback" not in done.stderr
    assert "cuda_kernels:" not in done.stderr  # the backend was never chosen


def test_the_wheels_are_the_tested_versions_for_python_312_x86_64():
    lines = fetch_wheels.requirements(None)
    names = {line.split("==")[0] for line in lines}
    assert {"numba", "numba-cuda", "llvmlite", "cuda-bindings"} <= names
    assert all("==" in line for line in lines)
    cmd = fetch_wheels.download_command(lines, Path("/tmp/x"))
    assert "--no-deps" in cmd and cmd[cmd.index("--python-version") + 1] == "3.12"
    assert any("x86_64" in c for c in cmd) and "--only-binary=:all:" in cmd
    (bindings,) = fetch_wheels.requirements(12, only=["cuda-bindings"])
    assert bindings.startswith("cuda-bindings==12.")
    with pytest.raises(SystemExit, match="unknown"):
        fetch_wheels.requirements(None, only=["tensorflow"])


def test_the_wheels_folder_is_git_ignored():
    done = subprocess.run(
        ["git", "check-ignore", "benchmarks/wheels/x.whl"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0
