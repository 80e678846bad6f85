"""`pagedsim grade`'s similarity flag: a submission that is the reference solution with
cosmetic changes (names, comments, docstrings, blank lines, formatting).

Both files are parsed (never run) and normalised: docstrings dropped, and every name a
file binds (functions, classes, arguments, variables) renamed in order of first appearance
(`n0`, `n1`, ...); attribute names, strings and numbers are kept. The normalised trees are
compared token by token (difflib); at or above THRESHOLD the result is flagged. A flag is
for the instructor to look at, never a fail: a short exercise may have one natural answer.
"""

from __future__ import annotations

import ast
import builtins
import difflib

from . import curriculum

THRESHOLD = 0.95  # share of normalised tokens in common with the reference solution
MAX_BYTES = 1 << 20  # larger files are not compared


class _Normalise(ast.NodeTransformer):
    def __init__(self):
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        if hasattr(builtins, name):
            return name
        return self.names.setdefault(name, f"n{len(self.names)}")

    def visit_Name(self, node):
        node.id = self._name(node.id)
        return node

    def visit_arg(self, node):
        node.arg, node.annotation = self._name(node.arg), None
        return node

    def _body(self, node):
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
        return node

    def visit_FunctionDef(self, node):
        node.name, node.returns = self._name(node.name), None
        return self.generic_visit(self._body(node))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        node.name = self._name(node.name)
        return self.generic_visit(self._body(node))

    def visit_Module(self, node):
        return self.generic_visit(self._body(node))

    def visit_AnnAssign(self, node):
        return self.generic_visit(ast.Assign([node.target], node.value or ast.Constant(None)))


def tokens(source: str | bytes) -> list[str] | None:
    """The normalised file as a list of tokens (None when it does not parse)."""
    if len(source) > MAX_BYTES:
        return None
    try:
        tree = _Normalise().visit(ast.parse(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return (
        ast.dump(tree, annotate_fields=False)
        .replace("(", " ( ")
        .replace(")", " ) ")
        .replace(",", " ")
        .split()
    )


def ratio(a: str | bytes, b: str | bytes) -> float:
    ta, tb = tokens(a), tokens(b)
    if not ta or not tb:
        return 0.0
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio()


def flag(exercise_id: str, source: bytes) -> str:
    """A one-line flag when `source` is the exercise's reference solution up to cosmetic
    changes, else ''. No flag where this installation has no reference solution."""
    try:
        reference = curriculum.find(exercise_id).path("solution")
        ref = reference.read_bytes()
    except (KeyError, OSError):
        return ""
    r = ratio(source, ref)
    if r < THRESHOLD:
        return ""
    what = "identical to" if r == 1.0 else f"{r:.0%} like"
    return (
        f"{what} the reference solution once names, comments and formatting are "
        "normalised: look at it (a flag, not a fail)"
    )
