"""The simulator core stays light: importing it never pulls in matplotlib or numba."""

import pkgutil
import subprocess
import sys

import pagedsim


def core_modules():
    names = ["pagedsim"]
    for info in pkgutil.walk_packages(pagedsim.__path__, "pagedsim."):
        if not info.name.startswith("pagedsim.draw"):
            names.append(info.name)
    return names


def test_the_core_never_imports_matplotlib_or_numba():
    modules = core_modules()
    assert "pagedsim.manager" in modules and "pagedsim.tour" in modules
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'numba'))\n"
            "print(heavy)\n"
            "sys.exit(1 if heavy else 0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, f"core imported heavy modules: {done.stdout} {done.stderr[-2000:]}"
