"""The kit's manager half is light: NumPy and Hypothesis, never matplotlib, Numba or pytest."""

import subprocess
import sys

from kit_paths import ROOT


def test_importing_the_kit_loads_neither_matplotlib_nor_numba_nor_pytest():
    code = (
        "import sys, pagedsim.testing, pagedsim.testing.conform\n"
        "assert 'hypothesis' in sys.modules and 'numpy' in sys.modules\n"
        "heavy = sorted(m for m in sys.modules\n"
        "               if m.split('.')[0] in\n"
        "               ('matplotlib', 'numba', 'pytest', 'cuda_kernels'))\n"
        "print(heavy)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, f"the kit imported heavy modules: {done.stdout} {done.stderr}"
