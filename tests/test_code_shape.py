"""No function over 80 lines and none with more than 8 parameters, outside kernel device code.

Every .py file of the project outside tests/ is parsed with `ast` (nothing is imported).
A function's length is its `def` line to its last line, decorators not counted; its
parameters are all of them (positional, keyword-only, `*args`, `**kwargs`) except a
method's `self` / `cls`. A function compiled for the GPU (any decorator named `jit`:
`cuda.jit`, `cuda.jit(device=True)`, `numba.njit`) is device code and exempt: a kernel's
signature is its launch, and a device function's is a list of registers.
"""

from __future__ import annotations

import ast
import functools
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = ("pagedsim", "course", "cuda_kernels", "benchmarks", "scripts", "examples")
MAX_LINES = 80
MAX_PARAMS = 8

# Signatures that are a PTX instruction's operand list, the honest shape for them: numba's
# @intrinsic typer takes exactly the intrinsic's arguments, and the simulator's stand-ins
# take the registers of the instruction they replace. Exempt for good.
PTX_SHAPED = {
    "cuda_kernels/gpu/intrinsics.py::_make_mma.typer": "mma.sync.m16n8k16: 4 A, 2 B, 4 C regs",
    "cuda_kernels/gpu/wgmma_intrinsics.py::_make_wgmma.typer": "wgmma.mma_async's operands",
    "cuda_kernels/sim/tensor_sim.py::mma_f16": "mma.sync.m16n8k16.f16: 4 A, 2 B, 4 C regs",
    "cuda_kernels/sim/tensor_sim.py::mma_bf16": "mma.sync.m16n8k16.bf16: 4 A, 2 B, 4 C regs",
}


def _is_device(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name.endswith("jit"):
            return True
    return False


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> int:
    a = node.args
    count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
    count += (a.vararg is not None) + (a.kwarg is not None)
    first = (a.posonlyargs + a.args)[:1]
    return count - (in_class and bool(first) and first[0].arg in ("self", "cls"))


def _functions(tree: ast.AST, prefix: str = "", in_class: bool = False):
    """(qualified name, node, defined directly in a class) for every def under `tree`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node, in_class
            yield from _functions(node, prefix + node.name + ".", False)
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".", True)
        else:
            yield from _functions(node, prefix, in_class)


@functools.cache
def measure() -> dict[str, tuple[int, int]]:
    """ "path::name" -> (lines, params) for every host function of the project."""
    found = {}
    for package in SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), rel)
            for name, node, in_class in _functions(tree):
                if not _is_device(node):
                    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    found[f"{rel}::{name}"] = (lines, _params(node, in_class))
    return found


def _over(lines: int, params: int) -> bool:
    return lines > MAX_LINES or params > MAX_PARAMS


def test_every_python_folder_is_measured():
    folders = [d for d in ROOT.iterdir() if d.is_dir() and not d.name.startswith(".")]
    holding = {d.name for d in folders if d.name != "tests" and next(d.rglob("*.py"), None)}
    missed = holding - set(SOURCES)
    assert not missed, f"folders with Python that the shape rule does not read: {sorted(missed)}"


def test_no_host_function_over_80_lines_or_8_parameters():
    found = measure()
    bad = [
        f"{key}: {lines} lines, {params} parameters"
        for key, (lines, params) in sorted(found.items())
        if _over(lines, params) and key not in PTX_SHAPED
    ]
    assert not bad, "split by meaning, or pass one named tuple:\n" + "\n".join(bad)


def test_each_ptx_shaped_exemption_still_offends():
    found = measure()
    gone = [key for key in PTX_SHAPED if key not in found or not _over(*found[key])]
    assert not gone, "no longer offends (or gone): delete from PTX_SHAPED:\n" + "\n".join(gone)


def test_the_rule_sees_a_long_function_and_a_wide_one(tmp_path):
    """The measure itself: a 81-line def and a 9-parameter def are caught, a jit one is not."""
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    src = (
        f"def long():\n{body}\n\n"
        "def wide(a, b, c, d, e, f, g, h, i):\n    pass\n\n"
        "class K:\n    def ok(self, a, b, c, d, e, f, g, h):\n        pass\n\n"
        "@cuda.jit(device=True)\ndef reg(a, b, c, d, e, f, g, h, i, j):\n    pass\n"
    )
    tree = ast.parse(src)
    shape = {
        name: (n.end_lineno - n.lineno + 1, _params(n, c))
        for name, n, c in _functions(tree)
        if not _is_device(n)
    }
    assert shape == {"long": (81, 0), "wide": (2, 9), "K.ok": (2, 8)}
    assert [name for name, (lines, params) in shape.items() if _over(lines, params)] == [
        "long",
        "wide",
    ]
