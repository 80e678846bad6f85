"""The GPU run's preflight and its offline wheels, without a GPU: the preflight reads
versions without importing numba, stops in one line naming the package, its version and
the fix when one is older than this checkout needs (faked with PAGEDSIM_FAKE_VERSIONS),
and gpu_attention.py stops there before `import cuda_kernels` could fail."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import fetch_wheels  # noqa: E402
import gpu_preflight as pf  # noqa: E402


def run(script, *args, **env):
    clean = {k: v for k, v in os.environ.items() if k != "PAGEDSIM_FAKE_VERSIONS"}
    clean["PYTHONPATH"] = str(ROOT)
    clean["OUT"] = tempfile.mkdtemp(prefix="pagedsim-preflight-")  # never the repository
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_tested_versions_are_pyprojects_and_the_floors_are_the_kernels_needs():
    text = (ROOT / "pyproject.toml").read_text()
    tested = pf.tested()
    assert f'"numba>={tested["numba"]}"' in text and f'"numba-cuda>={tested["numba-cuda"]}"' in text
    assert pf.FLOORS == {"numba-cuda": "0.21", "numba": "0.60"} and pf.WGMMA_FLOOR == "0.24"


def info(**versions) -> dict:
    base = {"numba": "0.68.1", "numba-cuda": "0.30.4", "cuda-bindings": "12.9.1"}
    base |= {"driver": "12.4", "tested": {"numba": "0.68", "numba-cuda": "0.30"}}
    base |= versions
    return {**base, "wgmma": pf.parse(base["numba-cuda"]) >= pf.parse(pf.WGMMA_FLOOR)}


@pytest.mark.parametrize(
    "have, stop, warn",
    [
        ("0.20.1", True, False),
        ("0.21.0", False, True),
        ("0.23.9", False, True),
        ("0.29.9", False, True),
        ("0.30.0", False, False),
        ("1.0", False, False),
        (None, True, False),
    ],
)
def test_numba_cuda_stops_below_the_floor_and_only_warns_up_to_the_tested_version(have, stop, warn):
    found = info(**{"numba-cuda": have})
    assert bool(pf.stops(found)) == stop
    if stop:
        (line,) = pf.stops(found)
        assert "numba-cuda" in line and "0.21" in line
    else:
        tested_warning = [w for w in pf.warnings_for(found) if "tested with" in w]
        assert bool(tested_warning) == warn
        assert any("wgmma" in w for w in pf.warnings_for(found)) == (pf.parse(have) < (0, 24))


def test_numba_060_is_enough_and_older_stops():
    assert not pf.stops(info(numba="0.60.0"))
    assert any("numba 0.59.1" in line for line in pf.stops(info(numba="0.59.1")))


@pytest.mark.parametrize(
    "bindings, driver, stop",
    [("13.0.1", "12.4", True), ("12.9.1", "13.0", False), ("12.9.1", "12.2", False)],
)
def test_cuda_bindings_newer_than_the_drivers_cuda_major_stops(bindings, driver, stop):
    lines = pf.stops(info(**{"cuda-bindings": bindings, "driver": driver}))
    assert bool(lines) == stop
    if stop:
        assert f"CUDA {driver.split('.')[0]} bindings" in lines[0]


def test_nvvm_ptx_newer_than_the_driver_can_jit_warns_with_the_fix():
    assert pf.driver_ptx_isa("12.4") == "8.4" and pf.driver_ptx_isa("12.7") == "8.5"
    assert pf.driver_ptx_isa("11.8") is None and pf.driver_ptx_isa("13.9") == "9.1"
    found = info(nvvm_ptx_isa="9.5", driver_ptx_isa="8.4")
    (line,) = [w for w in pf.warnings_for(found) if "PTX ISA" in w]
    assert "9.5" in line and "8.4" in line and "numba-cuda[cu12]" in line
    assert not [w for w in pf.warnings_for(info(nvvm_ptx_isa="8.4", driver_ptx_isa="8.4"))]


def test_an_old_numba_cuda_stops_the_preflight_in_one_line_naming_version_and_fix():
    done = run("gpu_preflight.py", PAGEDSIM_FAKE_VERSIONS="numba-cuda=0.20.1,python=3.10")
    assert done.returncode == pf.EXIT_TOO_OLD
    stop = [line for line in done.stdout.splitlines() if "older than" in line]
    assert len(stop) == 1, done.stdout
    assert "numba-cuda 0.20.1" in stop[0] and "--no-index" in stop[0]
    assert "benchmarks/wheels/py3.10" in stop[0]


def test_a_numba_cuda_between_floor_and_tested_runs_with_warnings_and_no_wgmma():
    done = run("gpu_preflight.py", PAGEDSIM_FAKE_VERSIONS="numba-cuda=0.22.0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning: numba-cuda 0.22.0 is older than" in done.stdout
    assert "wgmma (sm_90a) rows are skipped" in done.stdout


@pytest.mark.skipif(
    not (pf.WHEELS / "py3.10" / "requirements.txt").exists(),
    reason="no carried wheels for 3.10 (python benchmarks/fetch_wheels.py)",
)
def test_below_the_floor_the_install_of_the_faked_pythons_wheels_is_rehearsed_offline():
    """A faked Python 3.10: pip resolves the py3.10 wheels for 3.10, offline, installs
    nothing, and the preflight goes on with the versions it resolved."""
    done = run(
        "gpu_preflight.py", "--install", PAGEDSIM_FAKE_VERSIONS="numba-cuda=0.20.1,python=3.10"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rehearsing:" in done.stdout and "--python-version 3.10" in done.stdout
    assert "Would install" in done.stdout and "numba-cuda-0.30" in done.stdout


def test_the_install_command_is_offline_without_dependencies_from_the_pythons_folder():
    cmd = pf.install_command("3.11", rehearse=False)
    assert "--no-index" in cmd and "--no-deps" in cmd
    assert cmd[cmd.index("--find-links") + 1].endswith("wheels/py3.11")
    assert "--dry-run" not in cmd and "--dry-run" in pf.install_command("3.10", True, "/tmp/t")


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
        PAGEDSIM_FAKE_VERSIONS="numba-cuda=0.20.1,python=3.9",  # no wheels for 3.9: a stop
    )
    assert done.returncode == pf.EXIT_TOO_OLD
    assert "older than" in done.stderr and "Traceback" not in done.stderr
    assert "cuda_kernels:" not in done.stderr  # the backend was never chosen


def test_the_wheels_are_the_small_set_for_the_named_python_and_cuda_major():
    lines = fetch_wheels.wanted("3.10", 12)
    names = {line.split("=")[0].split(">")[0] for line in lines}
    assert names == {
        "numba-cuda",
        "cuda-bindings",
        "cuda-core",
        "cuda-pathfinder",
        "backports.strenum",
    }
    assert "cuda-bindings==12.9.*" in lines and "cuda-bindings==13.*" in fetch_wheels.wanted(
        "3.12", 13
    )
    assert not {"numba", "llvmlite"} & {
        line.split("=")[0] for line in fetch_wheels.wanted("3.12", 12)
    }
    cmd = fetch_wheels.download_command(lines, Path("/tmp/x"), "3.10")
    assert "--no-deps" in cmd and cmd[cmd.index("--python-version") + 1] == "3.10"
    assert any("x86_64" in c for c in cmd) and "--only-binary=:all:" in cmd
    assert fetch_wheels.PYTHONS[:2] == ("3.12", "3.10") and fetch_wheels.BUDGET_MIB == 40


@pytest.mark.skipif(not fetch_wheels.DEST.exists(), reason="no wheels fetched")
def test_the_fetched_wheels_fit_the_budget_and_pin_what_each_folder_holds():
    assert fetch_wheels.mib(fetch_wheels.DEST) < fetch_wheels.BUDGET_MIB
    for folder in fetch_wheels.DEST.glob("py3.*"):
        assert (folder / "requirements.txt").read_text().split() == fetch_wheels.pins(folder)
        tag = "cp" + folder.name[2:].replace(".", "")
        assert all(tag in w.name or "py3-none" in w.name for w in folder.glob("*.whl"))


def test_the_wheels_folder_is_git_ignored():
    done = subprocess.run(
        ["git", "check-ignore", "benchmarks/wheels/x.whl"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(
    not (pf.WHEELS / "py3.10" / "requirements.txt").exists(),
    reason="no carried wheels for 3.10 (python benchmarks/fetch_wheels.py)",
)
def test_the_one_command_rehearsed_under_the_lent_machines_limits_passes_every_check(tmp_path):
    """benchmarks/gpu_rehearsal.py: what the GPU machine receives (< 64 MiB), the README's
    one command in --dry-run with a faked numba-cuda 0.20.1 and Python 3.10, outputs only
    under $OUT, the rehearsed offline install and the summary in the log."""
    done = run("gpu_rehearsal.py", "--keep", str(tmp_path / "copy"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    checks = [line for line in done.stdout.splitlines() if line[:4] in ("ok  ", "FAIL")]
    assert len(checks) == 6 and all(line.startswith("ok") for line in checks), checks
