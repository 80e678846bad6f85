"""Preflight of the GPU run: what this machine has, and a one-line stop when it is too old.

    python benchmarks/gpu_preflight.py [--install]   # prints; exits 0, or 3 when too old
    gpu_attention.py runs `require()` first, before anything imports numba.cuda.

--install: when a package is too old and benchmarks/wheels/requirements.txt exists, install
those wheels offline (the command below), then check again in a fresh interpreter.

It prints numba, numba-cuda, llvmlite, cuda-bindings, torch, the CUDA driver and runtime
versions, the device's name and compute capability, all read without importing numba.cuda
(the driver and runtime through ctypes, the packages through importlib.metadata), so an
old numba-cuda cannot break the preflight itself. Then it compares each package with the
lower bound this checkout needs (`needs()`: numba and numba-cuda from pyproject.toml's
dependencies, the versions the kernels are tested with; llvmlite the one that numba
needs) and, when one is older or missing, stops with exit status 3 and one line naming the
package, its version, the bound and the fix: installing the wheels that
`benchmarks/fetch_wheels.py` downloaded beforehand (no network needed on the GPU machine):

    pip install --no-index --find-links benchmarks/wheels -r benchmarks/wheels/requirements.txt

Why these bounds: `from numba.cuda import types` (types.UniTuple in the kernels) needs
numba-cuda >= 0.21 and the wgmma kernel's sm_90a target >= 0.24; the project is tested
with the pyproject.toml bounds, so those are what the preflight asks for.
PAGEDSIM_FAKE_VERSIONS="numba-cuda=0.20.0,..." replaces installed versions (how the stop
is tested without an old install).
"""

from __future__ import annotations

import ctypes
import importlib.metadata as metadata
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXIT_TOO_OLD = 3
LLVMLITE_FOR_NUMBA = {"0.68": "0.50", "0.67": "0.49", "0.66": "0.48", "0.65": "0.47"}
FIX = (
    "pip install --no-index --find-links benchmarks/wheels "
    "-r benchmarks/wheels/requirements.txt  (wheels from: python benchmarks/fetch_wheels.py)"
)
PACKAGES = ("numba", "numba-cuda", "llvmlite", "cuda-bindings", "cuda-core", "torch", "numpy")


def parse(version: str | None) -> tuple:
    """(major, minor, patch) of a version string; () for None or an unparsable one."""
    m = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version or "")
    return tuple(int(x or 0) for x in m.groups()) if m else ()


def installed() -> dict:
    """{package: version or None}, PAGEDSIM_FAKE_VERSIONS applied."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    for item in filter(None, os.environ.get("PAGEDSIM_FAKE_VERSIONS", "").split(",")):
        name, _, version = item.partition("=")
        found[name.strip()] = version.strip() or None
    return found


def needs(pyproject: Path = ROOT / "pyproject.toml", numba_version: str | None = None) -> dict:
    """{package: lowest version}: numba and numba-cuda from pyproject.toml's dependencies,
    llvmlite the minor series the installed numba needs."""
    text = pyproject.read_text()
    bounds = {}
    for name in ("numba", "numba-cuda"):
        m = re.search(rf'"{re.escape(name)}(?:\[[^\]]*\])?>=([\d.]+)"', text)
        if m:
            bounds[name] = m.group(1)
    series = ".".join(map(str, parse(numba_version)[:2]))
    if series in LLVMLITE_FOR_NUMBA:
        bounds["llvmlite"] = LLVMLITE_FOR_NUMBA[series]
    return bounds


def problems(found: dict, bounds: dict) -> list[str]:
    """One line per package that is missing or older than its bound."""
    lines = []
    for name, lowest in bounds.items():
        have = found.get(name)
        if have is None:
            lines.append(f"{name} is not installed; this checkout needs {name} >= {lowest}")
        elif parse(have) < parse(lowest):
            lines.append(f"{name} {have} is older than the {lowest} this checkout needs")
    return lines


def _driver() -> dict:
    """CUDA driver version, device name and compute capability through libcuda (ctypes)."""
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            cuda = ctypes.CDLL(lib)
            break
        except OSError:
            continue
    else:
        return {"driver": None, "device": None, "compute_capability": None}
    version = ctypes.c_int(0)
    out = {"driver": None, "device": None, "compute_capability": None}
    if cuda.cuInit(0) != 0:
        return out
    if cuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
        out["driver"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
    device, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
    if cuda.cuDeviceGet(ctypes.byref(device), 0) == 0:
        if cuda.cuDeviceGetName(name, 256, device) == 0:
            out["device"] = name.value.decode(errors="replace")
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        if (
            cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device) == 0  # CC_MAJOR
            and cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device) == 0
        ):  # CC_MINOR
            out["compute_capability"] = f"{major.value}.{minor.value}"
    return out


def _runtime() -> str | None:
    """The CUDA runtime version (libcudart, wherever the loader or the nvidia wheels put
    it), or None."""
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    try:
        import nvidia

        for root in nvidia.__path__:
            names += [str(p) for p in sorted(Path(root).glob("**/libcudart.so*"))]
    except ImportError:
        pass
    for lib in names:
        try:
            cudart = ctypes.CDLL(lib)
        except OSError:
            continue
        version = ctypes.c_int(0)
        if cudart.cudaRuntimeGetVersion(ctypes.byref(version)) == 0:
            return f"{version.value // 1000}.{version.value % 1000 // 10}"
    return None


def report() -> dict:
    found = installed()
    return {
        "python": sys.version.split()[0],
        **found,
        "cuda_runtime": _runtime(),
        **_driver(),
        "needs": needs(numba_version=found.get("numba")),
    }


def require(stream=sys.stderr) -> dict:
    """Print the preflight; exit EXIT_TOO_OLD with one line when a package is too old."""
    info = report()
    print(
        "preflight: " + ", ".join(f"{k} {v}" for k, v in info.items() if k != "needs"), file=stream
    )
    bad = problems(info, info["needs"])
    if bad:
        print(f"preflight: {'; '.join(bad)}. Fix: {FIX}", file=stream)
        raise SystemExit(EXIT_TOO_OLD)
    return info


def install() -> int:
    """pip install --no-index from benchmarks/wheels, then a fresh preflight's status."""
    wheels = ROOT / "benchmarks" / "wheels"
    if not (wheels / "requirements.txt").exists():
        print(
            f"preflight: no {wheels / 'requirements.txt'}; run python "
            f"benchmarks/fetch_wheels.py on a machine with network first",
            file=sys.stderr,
        )
        return EXIT_TOO_OLD
    import subprocess

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--find-links",
            str(wheels),
            "-r",
            str(wheels / "requirements.txt"),
        ]
    )
    if done.returncode:
        return done.returncode
    env = {k: v for k, v in os.environ.items() if k != "PAGEDSIM_FAKE_VERSIONS"}
    return subprocess.run([sys.executable, str(Path(__file__).resolve())], env=env).returncode


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        require(sys.stdout)
    except SystemExit as stop:
        if "--install" not in argv:
            return int(stop.code)
        return install()
    return 0


if __name__ == "__main__":
    sys.exit(main())
