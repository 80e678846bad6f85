"""No import cycles between the project's modules, lazy imports included.

Every module of `pagedsim`, `course` and `cuda_kernels` is parsed with `ast` (nothing is
imported). Each `import` statement anywhere in a module -- at the top, inside a function,
under a `try` -- is an edge to the project module it loads, except those under
`if TYPE_CHECKING:`, which never run. `from pkg import name` points at `pkg.name` when that
is a module, else at `pkg` itself. A cycle among these edges fails the test, with its path.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("pagedsim", "course", "cuda_kernels")


def project_modules() -> dict[str, pathlib.Path]:
    """Dotted module name -> its file, for every .py file under the project's packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST):
    """Every Import / ImportFrom under `node`, skipping the body of `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _import_nodes_of(other)
            continue
        yield from _import_nodes_of(child)


def _import_nodes_of(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _import_nodes(node)


def imports_of(name: str, path: pathlib.Path, modules: dict) -> set[str]:
    """The project modules that module `name` (at `path`) imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [
                f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in modules else stem
                for alias in node.names
            ]
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a name inside a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def components(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each component, from its smallest module back to it."""
    return [_path_through(graph, set(c)) for c in components(graph)]


def _path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One cycle inside `component`: from its smallest module back to itself (BFS)."""
    start = min(component)
    parent = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return [start] + path[::-1][1:] + [start] if v != start else [start, start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle in {sorted(component)}")


def test_no_module_imports_its_way_back_to_itself():
    graph = import_graph()
    assert "pagedsim.manager" in graph and "course.cli" in graph, "the walk found the project"
    found = [_path_through(graph, set(c)) for c in components(graph)]
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_lazy_imports_count_and_type_checking_ones_do_not(tmp_path):
    modules = {
        "p": tmp_path / "p/__init__.py",
        "p.a": tmp_path / "p/a.py",
        "p.b": tmp_path / "p/b.py",
        "p.c": tmp_path / "p/c.py",
    }
    for path in modules.values():
        path.parent.mkdir(exist_ok=True)
    modules["p.a"].write_text("from . import b\n")
    modules["p.b"].write_text("def f():\n    from .a import x\n")
    modules["p.c"].write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from p.a import y\nelse:\n    import p.b\n"
    )
    modules["p"].write_text("")
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert graph == {"p": set(), "p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": {"p.b"}}
    assert components(graph) == [("p.a", "p.b")]
    assert cycles(graph) == [["p.a", "p.b", "p.a"]]
