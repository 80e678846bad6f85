"""The engine's one arrow to cuda_kernels: only kernels_backend.py imports it (or
numba), and serving on the NumPy backend never loads either."""

import ast
import subprocess
import sys
from pathlib import Path

import pagedsim.engine

ENGINE = Path(pagedsim.engine.__file__).parent


def imported_modules(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_kernels_backend_imports_cuda_kernels_or_numba():
    importers = sorted(
        p.name for p in ENGINE.glob("*.py") if imported_modules(p) & {"cuda_kernels", "numba"}
    )
    assert importers == ["kernels_backend.py"]


def test_serving_on_the_numpy_backend_loads_neither_numba_nor_cuda_kernels():
    code = (
        "import sys\n"
        "from pagedsim.config import CacheConfig\n"
        "from pagedsim.engine import PagedEngine, Request, TinyModel\n"
        "cache = CacheConfig(block_size=4, num_gpu_blocks=8, enable_prefix_caching=False)\n"
        "PagedEngine(TinyModel(), cache, backend='numpy').generate([Request((1, 2, 3), 4)])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', "
        "'cuda_kernels')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
