"""Choose the CUDA backend (a real GPU or Numba's CUDA simulator) before numba.cuda loads.

Numba reads `NUMBA_ENABLE_CUDASIM` once, when `numba.cuda` is first imported, so the
choice has to be made here, at the top of `cuda_kernels`, before anything imports it.

Rule, in order: `PAGEDSIM_CUDA=gpu|simulator` forces a mode; `NUMBA_ENABLE_CUDASIM=1`
means the simulator; a visible driver (/dev/nvidiactl, or libcuda found with ctypes,
without initialising it) means a GPU; else the simulator, said once on stderr. If
`numba.cuda` was imported earlier in another mode, `select()` warns and `backend()`
reports the mode numba actually runs in.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
import warnings

_MODES = ("gpu", "simulator")
_state: dict = {}  # {"mode": "gpu"|"simulator"}


def _driver_visible() -> bool:
    if os.path.exists("/dev/nvidiactl"):
        return True
    return ctypes.util.find_library("cuda") is not None


def _wanted() -> tuple[str, str]:
    forced = os.environ.get("PAGEDSIM_CUDA", "").strip().lower()
    if forced:
        if forced not in _MODES:
            raise ValueError(f"PAGEDSIM_CUDA must be 'gpu' or 'simulator', got {forced!r}")
        return forced, f"forced by PAGEDSIM_CUDA={forced}"
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0"):
        return "simulator", "NUMBA_ENABLE_CUDASIM is set"
    if _driver_visible():
        return "gpu", "an NVIDIA driver is visible"
    return "simulator", "no NVIDIA driver found (no /dev/nvidiactl, no libcuda)"


def select() -> str:
    """Decide the mode once per process and configure numba accordingly."""
    if _state:
        return _state["mode"]
    mode, reason = _wanted()
    if "numba.cuda" in sys.modules:  # too late to choose: report what numba already runs
        from numba.cuda.core import config as cuda_config

        actual = "simulator" if cuda_config.ENABLE_CUDASIM else "gpu"
        if actual != mode:
            warnings.warn(
                f"cuda_kernels wanted the {mode} backend ({reason}) but numba.cuda was already "
                f"imported in {actual} mode; using {actual}. Import cuda_kernels (or set "
                f"NUMBA_ENABLE_CUDASIM) before numba.cuda.",
                RuntimeWarning,
                stacklevel=3,
            )
        mode, reason = actual, "numba.cuda was already imported"
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if mode == "simulator" else "0"
        if "numba" in sys.modules:  # numba's own config already read the environment
            import numba.core.config as numba_config

            numba_config.ENABLE_CUDASIM = int(mode == "simulator")
        if reason.startswith("no NVIDIA"):  # the automatic fallback: say so once
            print(
                f"cuda_kernels: {reason}; running kernels on Numba's CUDA simulator",
                file=sys.stderr,
            )
    _state["mode"] = mode
    return mode


def backend() -> str:
    """'gpu' or 'simulator': where this process runs the kernels."""
    return select()


def block_threads() -> int:
    """Threads per block for the simple kernels: 128 on a GPU, 16 under the simulator."""
    return 128 if select() == "gpu" else 16
