"""Preflight of the GPU run: what this machine has, what can run on it, and the fix.

    python benchmarks/gpu_preflight.py [--install]   # prints; exits 0, or 3 when it cannot run

Nothing here imports numba.cuda (ctypes reads the driver and runtime), so an old numba-cuda
cannot break it. benchmarks/README.md states the floors, the warnings and the offline
install. PAGEDSIM_FAKE_VERSIONS="numba-cuda=0.20.1,python=3.10,driver=12.4" replaces what
is installed; the install is then only resolved offline for the faked Python.
"""

from __future__ import annotations

import ctypes
import importlib.metadata as metadata
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / "benchmarks" / "wheels"
EXIT_TOO_OLD = 3
FLOORS = {"numba-cuda": "0.21", "numba": "0.60"}
WGMMA_FLOOR = "0.24"  # numba-cuda's first with the sm_90a ("a") compute capability
PACKAGES = ("numba", "numba-cuda", "llvmlite", "cuda-bindings", "cuda-core", "torch", "numpy")
# The newest PTX ISA a driver of each CUDA version can JIT (PTX ISA release notes).
DRIVER_PTX_ISA = {
    "12.0": "8.0",
    "12.1": "8.1",
    "12.2": "8.2",
    "12.3": "8.3",
    "12.4": "8.4",
    "12.5": "8.5",
    "12.6": "8.5",
    "12.8": "8.7",
    "12.9": "8.8",
    "13.0": "9.0",
    "13.1": "9.1",
}
INSTALLED_ENV = "PAGEDSIM_PREFLIGHT_INSTALLED"  # set for the fresh interpreter after --install


def parse(version: str | None) -> tuple:
    """(major, minor, patch); () for None or an unparsable string."""
    m = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version or "")
    return tuple(int(x or 0) for x in m.groups()) if m else ()


def fakes() -> dict:
    """{name: version} from PAGEDSIM_FAKE_VERSIONS="numba-cuda=0.20.1,python=3.10"."""
    items = filter(None, os.environ.get("PAGEDSIM_FAKE_VERSIONS", "").split(","))
    pairs = (item.partition("=") for item in items)
    return {name.strip(): version.strip() or None for name, _, version in pairs}


def installed() -> dict:
    """{package: version or None}, PAGEDSIM_FAKE_VERSIONS applied to packages."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return {**found, **{k: v for k, v in fakes().items() if k in PACKAGES}}


def tested(pyproject: Path = ROOT / "pyproject.toml") -> dict:
    """{package: version} of numba and numba-cuda in pyproject.toml: what the kernels are
    tested with (below them the run warns)."""
    text = pyproject.read_text()
    found = {
        n: re.search(rf'"{n}(?:\[[^\]]*\])?>=([\d.]+)"', text) for n in ("numba", "numba-cuda")
    }
    return {name: m.group(1) for name, m in found.items() if m}


def python_version() -> str:
    return fakes().get("python") or f"{sys.version_info.major}.{sys.version_info.minor}"


def wheel_dir(python: str | None = None) -> Path:
    """The carried wheels of a Python (default: the running one, or the faked one)."""
    return WHEELS / f"py{python or python_version()}"


def _major(version: str | None) -> int | None:
    return parse(version)[0] if parse(version) else None


def stops(info: dict) -> list[str]:
    """One line per reason the run cannot start: a package missing or below its floor, a
    cuda-bindings of a newer CUDA major than the driver."""
    lines = []
    for name, floor in FLOORS.items():
        have = info.get(name)
        if have is None:
            lines.append(f"{name} is not installed; the kernels need {name} >= {floor}")
        elif parse(have) < parse(floor):
            lines.append(f"{name} {have} is older than the {floor} the kernels need")
    bindings, driver = _major(info.get("cuda-bindings")), _major(info.get("driver"))
    if bindings and driver and bindings > driver:
        lines.append(
            f"cuda-bindings {info['cuda-bindings']} is for CUDA {bindings}, the driver "
            f"serves CUDA {info['driver']}: it needs the CUDA {driver} bindings"
        )
    return lines


def warnings_for(info: dict) -> list[str]:
    """One line per thing that runs but differs from what this checkout is tested with."""
    lines = []
    for name, want in info["tested"].items():
        have = info.get(name)
        if have and parse(FLOORS.get(name)) <= parse(have) < parse(want):
            lines.append(f"{name} {have} is older than the {want} the kernels are tested with")
    if not info["wgmma"]:
        lines.append(
            f"numba-cuda {info.get('numba-cuda')} < {WGMMA_FLOOR}: the wgmma (sm_90a) rows "
            f"are skipped"
        )
    nvvm, jit, major = info.get("nvvm_ptx_isa"), info.get("driver_ptx_isa"), _major(info["driver"])
    if nvvm and jit and parse(nvvm) > parse(jit):
        lines.append(
            f"NVVM emits PTX ISA {nvvm}, the driver ({info['driver']}) JITs up to {jit}: "
            f"kernels load only through nvJitLink; if launches fail with "
            f"CUDA_ERROR_UNSUPPORTED_PTX_VERSION, install the CUDA {major} toolchain "
            f"(pip install 'numba-cuda[cu{major}]') or a newer driver"
        )
    return lines


def driver_ptx_isa(driver: str | None) -> str | None:
    """The newest PTX ISA the driver JITs: the table's entry for its version, or for the
    newest version below it (None for an unknown or older driver)."""
    known = [v for v in DRIVER_PTX_ISA if parse(v) <= parse(driver)] if driver else []
    return DRIVER_PTX_ISA[max(known, key=parse)] if known else None


def nvvm_ptx_isa() -> str | None:
    """The `.version` of the PTX NVVM makes for an empty kernel, in a child process (so no
    numba.cuda is imported here); None when that fails."""
    code = (
        "from numba import cuda\n"
        "def k():\n    pass\n"
        "print(cuda.compile_ptx(k, (), cc=(8, 0))[0].split('.version', 1)[1].split()[0])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=90
        )
    except subprocess.TimeoutExpired:
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _driver() -> dict:
    """CUDA driver version, device name and compute capability through libcuda (ctypes)."""
    out = {"driver": None, "device": None, "compute_capability": None}
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            cuda = ctypes.CDLL(lib)
            break
        except OSError:
            continue
    else:
        return out
    version = ctypes.c_int(0)
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
    """The CUDA runtime's version (libcudart, from the loader or the nvidia wheels), or None."""
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


def report(isa: bool = True) -> dict:
    """Everything the preflight reads; isa=False skips the NVVM child (a few seconds)."""
    found = installed()
    driver = {**_driver(), **{k: v for k, v in fakes().items() if k == "driver"}}
    info = {
        "python": python_version(),
        **found,
        "cuda_runtime": _runtime(),
        **driver,
        "floors": FLOORS,
        "tested": tested(),
        "wheels": str(wheel_dir().relative_to(ROOT)),
        "wgmma": wgmma_ok(found),
    }
    if isa and not stops(info):
        info["nvvm_ptx_isa"] = nvvm_ptx_isa()
        info["driver_ptx_isa"] = driver_ptx_isa(info["driver"])
    return info


def wgmma_ok(found: dict | None = None) -> bool:
    """Whether numba-cuda (of `found`, else installed, faked or not) builds the sm_90a wgmma."""
    return parse((found or installed()).get("numba-cuda")) >= parse(WGMMA_FLOOR)


def install_command(python: str, rehearse: bool, target: str = "") -> list[str]:
    """pip's offline install of the carried wheels of `python`; rehearse: resolve them for
    that Python into a scratch target without installing anything here."""
    where = wheel_dir(python)
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps"]
    cmd += ["--find-links", str(where), "-r", str(where / "requirements.txt")]
    if rehearse:
        cmd += ["--dry-run", "--target", target, "--only-binary=:all:"]
        cmd += ["--python-version", python, "--implementation", "cp"]
        cmd += ["--ignore-requires-python"]  # pip checks a local wheel's against this Python
    return cmd


def install(info: dict, stream) -> bool:
    """Install (with faked versions: rehearse) the carried wheels of the running Python; True
    when pip succeeded. A rehearsal updates `info` to the versions it resolved."""
    python, rehearse = info["python"], bool(fakes())
    req = wheel_dir(python) / "requirements.txt"
    if not req.exists():
        print(
            f"preflight: no {req.relative_to(ROOT)}: run python benchmarks/fetch_wheels.py "
            f"--python {python} on a machine with network, and carry benchmarks/wheels",
            file=stream,
        )
        return False
    with tempfile.TemporaryDirectory() as tmp:
        cmd = install_command(python, rehearse, tmp)
        print(f"preflight: {'rehearsing' if rehearse else 'running'}: {' '.join(cmd)}", file=stream)
        done = subprocess.run(cmd, capture_output=True, text=True)
    print(done.stdout[-2000:] + done.stderr[-2000:], file=stream)
    if done.returncode == 0 and rehearse:
        for line in req.read_text().split():
            name, _, version = line.partition("==")
            if name in info:
                info[name] = version
        info["wgmma"] = wgmma_ok(info)
        info["installed"] = f"rehearsed from {req.parent.relative_to(ROOT)}"
    return done.returncode == 0


def require(stream=None, install_wheels: bool = False) -> dict:
    """Print the preflight to `stream` (default: sys.stderr as it is now, a log's tee
    included); with install_wheels, fix a stop from the carried wheels (then start again,
    or in a rehearsal go on); exit EXIT_TOO_OLD with one line when it cannot run."""
    stream = stream or sys.stderr
    info = report()
    shown = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("floors", "tested"))
    print(f"preflight: {shown}", file=stream)
    bad = stops(info)
    if bad and install_wheels and not os.environ.get(INSTALLED_ENV):
        if install(info, stream):
            if "installed" not in info:  # a real install: check again in a fresh interpreter
                os.environ[INSTALLED_ENV] = "1"
                os.execv(sys.executable, [sys.executable, *sys.argv])
            bad = stops(info)
    if bad:
        fix = (
            f"pip install --no-index --no-deps --find-links {info['wheels']} "
            f"-r {info['wheels']}/requirements.txt (wheels from: python "
            f"benchmarks/fetch_wheels.py --python {info['python']} --cuda 12)"
        )
        print(f"preflight: {'; '.join(bad)}. Fix: {fix}", file=stream)
        raise SystemExit(EXIT_TOO_OLD)
    for line in warnings_for(info):
        print(f"preflight: warning: {line}", file=stream)
    return info


if __name__ == "__main__":
    require(sys.stdout, install_wheels="--install" in sys.argv[1:])  # SystemExit(3): a stop
