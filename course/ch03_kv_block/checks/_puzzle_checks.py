"""The two checks every kernel puzzle has, written once: the spec on Hypothesis's shapes under the
stepper (with the thread table on a failure), and one real launch under Numba's CUDA simulator
(or a GPU). Each puzzle's check file supplies `case(draw)` and the spec."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import compare, run_threads
from course.i18n import say

# a few small shapes: the stepper runs one Python thread per simulated thread; no shrinking (the
# message names the shapes and prints the threads, which says more than a smaller example)
PUZZLE = settings(
    max_examples=8,
    derandomize=True,
    database=None,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
)


def check_spec(impl, name, case, spec, *, outputs, owner, extra=2):
    """One check function body: draw a case, run kernel `name` stepped, compare every output."""

    @PUZZLE
    @given(st.data())
    def run(data):
        arrays, threads, shown = case(data.draw)
        want = spec(**{k: np.array(v, copy=True) for k, v in arrays.items()})
        try:
            log = run_threads(getattr(impl, name), threads + extra, arrays)
        except Exception as e:  # the student's kernel raised: say on which case
            try:
                e.calls = f"{name} on {shown}, {threads} threads (+{extra} extra past the data)"
            except AttributeError:
                pass
            raise
        for out_name in outputs:
            compare(
                log,
                arrays[out_name],
                want[out_name],
                out_name=out_name,
                owner=lambda index, o=out_name: owner(o, index, arrays),
                what=f"{name} on {shown}, {threads} threads (+{extra} extra)",
            )

    run()


def check_launch(impl, name, arrays, threads, spec, outputs):
    """A real launch: one block of `threads` threads; the outputs equal the spec."""
    want = spec(**{k: np.array(v, copy=True) for k, v in arrays.items()})
    getattr(impl, name)[1, threads](*arrays.values())
    for out_name in outputs:
        got = np.asarray(arrays[out_name], np.float64)
        assert np.allclose(got, want[out_name], atol=1e-5, equal_nan=True), say(
            f"launched on Numba's CUDA simulator (1 block of {threads} threads), {name} left "
            f"{out_name} different from the spec by {np.nanmax(np.abs(got - want[out_name])):.3g}",
            f"在 Numba 的 CUDA 模拟器上启动（1 个块、{threads} 个线程）后，{name} 的 {out_name} "
            f"与规范相差 {np.nanmax(np.abs(got - want[out_name])):.3g}",
        )
