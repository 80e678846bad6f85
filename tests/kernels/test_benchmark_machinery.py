"""The GPU benchmark's shared machinery without a GPU: gpu_common imported alone picks
the backend, the per-phase time guard on a fake clock, the compile clock on a real numba
compile, the peak helpers, the auto plan, and the tensor-core configurations through the
benchmark's own device check."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import cuda_kernels as ck

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_attention  # noqa: E402
import gpu_common as common  # noqa: E402

# what the fresh interpreter prints: the backend cuda_kernels chose and numba's own mode
PROBE = """
import sys
sys.path.insert(0, "benchmarks")
import gpu_common
import cuda_kernels
from numba.cuda.core import config
print(cuda_kernels.backend(), "simulator" if config.ENABLE_CUDASIM else "gpu")
"""


def probe(**env):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("NUMBA_ENABLE_CUDASIM", "PAGEDSIM_CUDA")}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), clean.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", PROBE],
                          cwd=ROOT, env={**clean, **env}, capture_output=True, text=True,
                          timeout=300)


def test_gpu_common_imported_first_in_a_fresh_process_selects_the_backend_itself():
    done = probe(PAGEDSIM_CUDA="simulator")
    assert done.returncode == 0, done.stderr  # no "numba.cuda was already imported" warning
    assert done.stdout.split() == ["simulator", "simulator"]


@pytest.mark.skipif(ck._backend._driver_visible(), reason="an NVIDIA driver is visible here")
def test_without_a_driver_gpu_common_alone_falls_back_to_the_simulator_and_says_so():
    done = probe()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["simulator", "simulator"]
    assert "running kernels on Numba's CUDA simulator" in done.stderr


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_phase_runs_only_when_its_budget_fits_in_what_is_left_and_is_timed():
    clock = FakeClock()
    guard = common.Phases(total_s=100, clock=clock)

    def work(seconds):
        def fn(g):
            clock.now += seconds
            return seconds
        return fn

    assert guard.run("a", 30, work(40)) == 40  # a phase may overrun its own budget ...
    assert guard.run("b", 70, work(1), default="skipped") == "skipped"  # ... 60 s left < 70
    assert guard.run("c", 60, work(5)) == 5
    assert guard.record["a"]["seconds"] == 40 and guard.record["c"]["seconds"] == 5
    assert guard.record["b"] == {"skipped": "needs 70 s, 60 s left"}
    assert list(guard.record) == ["a", "b", "c"]


def test_inside_a_phase_left_is_its_budget_cut_at_the_run_deadline():
    clock = FakeClock()
    guard = common.Phases(total_s=100, clock=clock)
    seen = []

    def cases(g):
        for _ in range(5):
            seen.append(g.left())
            clock.now += 10

    guard.run("decode", 35, cases)
    assert seen == [35, 25, 15, 5, -5]  # the phase decides to stop; the guard tells it when
    clock.now = 95
    assert guard.run("late", 4, lambda g: g.left()) == 4  # 5 s left to the deadline


def test_the_compile_clock_counts_an_outermost_compiler_lock_once_however_deep():
    """A kernel's compile takes numba's compiler lock again for each device function."""
    from numba.cuda.core import event
    with common.CompileClock() as clock:
        for _ in range(2):  # two compiles, the first with a nested device-function compile
            event.start_event("numba-cuda:compiler_lock")
            event.start_event("numba-cuda:compiler_lock")
            event.end_event("numba-cuda:compiler_lock")
            event.end_event("numba-cuda:compiler_lock")
    event.start_event("numba-cuda:compiler_lock")  # after the clock is removed: not counted
    event.end_event("numba-cuda:compiler_lock")
    assert clock.count == 2 and clock.seconds >= 0


def test_tflops_and_the_tensor_peak_share_come_from_the_roofline_constants():
    assert common.tflops(2e12, 1000.0) == 2.0
    assert common.pct_of_tensor_peak(990e12 * 1e-3, 1.0) == pytest.approx(100.0)
    assert common.tflops(1.0, None) is None and common.pct_of_tensor_peak(1.0, 0) is None
    assert common.L2_BYTES == 50 * 10**6


def test_the_auto_row_times_what_paged_attention_launches_and_reads_its_plan_back():
    rng = np.random.default_rng(3)
    lens = np.array([30, 7], np.int32)
    tables, num_blocks = ck.reference.scattered_block_tables(rng, lens, 4, spare=1)
    cache = cuda.to_device(rng.standard_normal((num_blocks, 2, 1, 4, 16)).astype(np.float16))
    query = cuda.to_device(rng.standard_normal((2, 4, 16)).astype(np.float16))
    launch, out, plan = common.auto_launch(ck.BLOCK_MAJOR, cache, cache, query,
                                           cuda.to_device(tables), cuda.to_device(lens),
                                           block_size=4, num_kv_heads=1)
    assert plan["path"] == "tensor" and plan["num_partitions"] == 1  # G = 4, float16, D = 16
    launch()
    want = ck.reference.paged_attention(query.copy_to_host(), cache.copy_to_host(), tables, lens)
    assert np.abs(out.copy_to_host() - want).max() < 4e-3 * np.abs(want).max()


@pytest.mark.parametrize("mode", ["single", "split"])
@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_the_benchmarks_tensor_core_configurations_pass_its_device_check(layout, mode):
    rng = np.random.default_rng(11)
    assert gpu_attention.check_config(rng, heads=4, kv_heads=1, dim=16, dtype="float16",
                                      mode=mode, layout=layout, dry=True, context=24,
                                      path="tensor")
