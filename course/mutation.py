"""Mutation testing of the reference solutions: do the checks catch the bugs they must?

The *named* mutants are the mistakes students make: text patches of the solutions in
`ch03_kv_block/mutants.toml` (`WRONG`: some check must fail on each; `RIGHT`: correct
variants, each must pass). The *generic* ones are the blind measure: every mutant made by
rewriting a solution's syntax tree at one point, of four kinds:

    operator    + <-> -, * <-> /, // -> /, % -> //, & <-> |, ** -> *, << <-> >>, and <-> or,
                unary - and not dropped (also in `x += ...`)
    comparison  < <-> <=, > <-> >=, == <-> !=, is <-> is not, in <-> not in
    constant    an int or float c -> c + 1, True <-> False (strings are left alone)
    statement   one statement of a function body replaced by `pass` (not docstrings, imports)

A check that fails, errors or times out on a mutant catches it. EQUIVALENT
(ch03_kv_block/equivalent_mutants.toml) lists, with reasons, the mutants no check can tell
from the solution: reported, not counted. At least GENERIC_TARGET of the rest must be caught.

    pagedsim check --mutants [--generic [--sample N]]      (`report`)
    python -m course.mutation [ID ...] [--sample N] [--list] [--survivors]
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import curriculum
from .runner import print_report, run_checks

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

GENERIC_TARGET = 0.95  # the share of generic mutants the checks must catch, per exercise
CATALOGUE = Path(__file__).parent / "ch03_kv_block" / "mutants.toml"
EQUIVALENTS = CATALOGUE.with_name("equivalent_mutants.toml")


@dataclass(frozen=True)
class Mutant:
    """One entry of the named-mutant table: a patch of one reference solution."""

    exercise: str  # curriculum id
    name: str  # short snake_case name, shown in the table
    mistake: str  # the mistake in one sentence (for a RIGHT entry: how it is written differently)
    old: str  # text in the solution (must occur exactly once)
    new: str  # what the variant says instead
    # words the first failure's message must contain (the true cause), if given; " | " separates
    # alternatives, for a bug that shows either as a wrong value or as an exception it causes
    says: str = ""

    def apply(self, source: str) -> str:
        """The solution's source with this patch applied; refused unless `old` occurs once."""
        found = source.count(self.old)
        if found != 1:
            raise ValueError(
                f"mutant {self.exercise}/{self.name}: its patch matches {found} places in the "
                "solution"
            )
        return source.replace(self.old, self.new)


def _load(kind: str) -> list[Mutant]:
    table = tomllib.loads(CATALOGUE.read_text(encoding="utf-8")).get(kind, [])
    return [Mutant(**row) for row in table]


WRONG: list[Mutant] = _load("wrong")  # mistakes: some check must fail on each
RIGHT: list[Mutant] = _load("right")  # correct solutions written differently: each must pass


def wrong_for(exercise_id: str) -> list[Mutant]:
    return [m for m in WRONG if m.exercise == exercise_id]


_BOTH_WAYS = (  # each operator becomes the other one of its pair, and back
    (ast.Add, ast.Sub),
    (ast.Mult, ast.Div),
    (ast.BitAnd, ast.BitOr),
    (ast.LShift, ast.RShift),
    (ast.And, ast.Or),
    (ast.Lt, ast.LtE),
    (ast.Gt, ast.GtE),
    (ast.Eq, ast.NotEq),
    (ast.Is, ast.IsNot),
    (ast.In, ast.NotIn),
)
# binary (also in `x += ...`), boolean and comparison operators -> the mutant's operator
SWAP = {a: b for x, y in _BOTH_WAYS for a, b in ((x, y), (y, x))}
SWAP.update({ast.FloorDiv: ast.Div, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult})


def _symbol(op: type) -> str:
    """ast.Add as "+", ast.NotIn as "not in"."""
    a, b = ast.Name("a"), ast.Name("b")
    if issubclass(op, ast.cmpop):
        return ast.unparse(ast.Compare(a, [op()], [b]))[2:-2]
    if issubclass(op, ast.boolop):
        return ast.unparse(ast.BoolOp(op(), [a, b]))[2:-2]
    return ast.unparse(ast.BinOp(a, op(), b))[2:-2]


def _equivalent() -> dict[tuple[str, str], str]:
    """(exercise, mutant key) -> why no check can tell it from the solution
    (ch03_kv_block/equivalent_mutants.toml)."""
    table = tomllib.loads(EQUIVALENTS.read_text(encoding="utf-8"))
    return {(r["exercise"], r["key"]): table["reasons"][r["why"]] for r in table["equivalent"]}


EQUIVALENT = _equivalent()


@dataclass(frozen=True)
class Generic:
    exercise: str
    index: int  # position in the order the points are found
    kind: str  # operator | comparison | constant | statement
    line: int
    change: str  # e.g. "+ -> -"
    source_line: str
    function: str = ""  # the enclosing function ('' at module level)
    nth: int = 0  # 1, 2, ... when the same change fits several places on the line, in source order

    @property
    def key(self) -> str:
        where = f" in {self.function}" if self.function else ""
        return f"{self.kind}{where}: {self.source_line} :: {self.change}" + (
            f" [{self.nth}]" if self.nth else ""
        )


def _annotation_nodes(tree) -> set:
    """ids of nodes inside annotations: never evaluated (from __future__ import annotations)."""
    out = set()
    for node in ast.walk(tree):
        for n in (getattr(node, "returns", None), getattr(node, "annotation", None)):
            if n is not None:
                out.update(id(x) for x in ast.walk(n))
    return out


def _function_nodes(tree) -> set:
    """ids of nodes inside a function body, or in its default values."""
    out = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.update(id(n) for n in ast.walk(fn) if n is not fn)
            out.update(id(a) for a in fn.args.defaults + fn.args.kw_defaults if a is not None)
    return out


def _statement_points(tree, in_function: set) -> list:
    """Deleting one statement of a function body (not a docstring, an import or a pass)."""
    bodies = in_function | {
        id(n) for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    out = []
    for parent in ast.walk(tree):
        for fieldname, value in ast.iter_fields(parent):
            if fieldname != "body" or not isinstance(value, list) or id(parent) not in bodies:
                continue
            for i, stmt in enumerate(value):
                text = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                if i == 0 and text and isinstance(stmt.value.value, str):  # a docstring
                    continue
                if not isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)):
                    delete = functools.partial(_to_pass, value, i)
                    out.append((stmt, "statement", "deleted", delete))
    return out


def _to_pass(body: list, i: int, _node) -> None:
    body[i] = ast.Pass()


def _drop_unary(n) -> None:
    if isinstance(n.op, ast.Not):  # `not x` becomes `not not x`
        n.operand = ast.UnaryOp(ast.Not(), n.operand)
    else:
        n.op = ast.UAdd()


def _operator_points(node) -> list:
    if isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)) and type(node.op) in SWAP:
        new = SWAP[type(node.op)]
        change = f"{_symbol(type(node.op))} -> {_symbol(new)}"
        return [(node, "operator", change, lambda n, new=new: setattr(n, "op", new()))]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not, ast.Invert)):
        return [(node, "operator", f"unary {type(node.op).__name__} dropped", _drop_unary)]
    return []


def _comparison_points(node) -> list:
    out = []
    for k, op in enumerate(node.ops):
        if type(op) in SWAP:
            new, was = SWAP[type(op)], _symbol(type(op))
            left = node.left if k == 0 else node.comparators[k - 1]
            what = f"{ast.unparse(left)} {was} {ast.unparse(node.comparators[k])}"
            change = f"{what}: {was} -> {_symbol(new)}"
            out.append(
                (node, "comparison", change, lambda n, k=k, new=new: n.ops.__setitem__(k, new()))
            )
    return out


def _constant_points(node) -> list:
    v = node.value
    if isinstance(v, bool):
        return [(node, "constant", f"{v} -> {not v}", lambda n: setattr(n, "value", not n.value))]
    if isinstance(v, (int, float)):
        return [
            (node, "constant", f"{v!r} -> {v + 1!r}", lambda n: setattr(n, "value", n.value + 1))
        ]
    return []


def _points(tree: ast.Module):
    """Every mutation point: (node, kind, change, apply) where apply(node) mutates in place.
    Statements come first, then the expressions in ast.walk order (the indices are stable)."""
    in_annotation, in_function = _annotation_nodes(tree), _function_nodes(tree)
    out = _statement_points(tree, in_function)
    for node in ast.walk(tree):
        if id(node) in in_annotation:
            continue
        if isinstance(node, ast.Compare):
            out += _comparison_points(node)
        elif isinstance(node, ast.Constant):
            out += _constant_points(node) if id(node) in in_function else []
        else:
            out += _operator_points(node)
    return out


def _functions(tree) -> dict[int, str]:
    """Line number -> name of the innermost function defined over it."""
    out = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for line in range(fn.lineno, (fn.end_lineno or fn.lineno) + 1):
                if line not in out or out[line][0] < fn.lineno:
                    out[line] = (fn.lineno, fn.name)
    return {line: name for line, (_, name) in out.items()}


def generate(exercise_id: str, source: str) -> list[tuple[Generic, str]]:
    """Every generic mutant of `source`, with its mutated source text."""
    lines = source.splitlines()
    functions = _functions(ast.parse(source))
    out = []
    for index in range(len(_points(ast.parse(source)))):
        tree = ast.parse(source)
        node, kind, change, apply = _points(tree)[index]
        apply(node)
        line = getattr(node, "lineno", 0)
        where = (lines[line - 1].strip() if line else "", functions.get(line, ""))
        m = Generic(exercise_id, index, kind, line, change, *where)
        out.append(
            (m, ast.unparse(ast.fix_missing_locations(tree)), getattr(node, "col_offset", 0))
        )
    by_key: dict[str, list] = {}
    for item in out:
        by_key.setdefault(item[0].key, []).append(item)
    numbered = {}
    for items in by_key.values():
        if len(items) > 1:
            for k, item in enumerate(sorted(items, key=lambda it: (it[2], it[0].index)), 1):
                numbered[item[0].index] = k
    return [(dataclasses.replace(m, nth=numbered.get(m.index, 0)), text) for m, text, _ in out]


@dataclass
class Result:
    mutant: Generic
    caught_by: str | None  # the first failing check, or None
    equivalent: str | None = None  # the reason, when listed in EQUIVALENT


def measure(ex, *, sample: int | None = None, seed: int = 0, seconds: float = 10.0) -> list[Result]:
    """Run every (or a seeded sample of) generic mutant of `ex`'s solution against its checks."""
    source = ex.path("solution").read_text(encoding="utf-8")
    mutants = generate(ex.id, source)
    if sample is not None and sample < len(mutants):
        mutants = sorted(
            random.Random(f"{seed}-{ex.id}").sample(mutants, sample), key=lambda m: m[0].index
        )
    results = []
    with tempfile.TemporaryDirectory(prefix="pagedsim-generic-") as tmp:
        for m, text in mutants:
            reason = EQUIVALENT.get((ex.id, m.key))
            if reason:
                results.append(Result(m, None, reason))
                continue
            path = Path(tmp) / f"{Path(ex.solution).stem}_g{m.index}.py"
            path.write_text(text, encoding="utf-8")
            how = dict(stop_at_first=True, seconds=seconds, isolate=False)  # ours: trusted, many
            fast = run_checks(ex, path, markers="not kernels", **how)
            if fast.ok or not fast.failures and not fast.error:
                fast = run_checks(ex, path, markers="kernels", **how)
            caught = fast.failures[0].check if fast.failures else (fast.error and "error")
            results.append(Result(m, caught or None))
    return results


def score(results: list[Result]) -> tuple[int, int, int]:
    """(caught, counted, equivalent): equivalent mutants are not counted."""
    counted = [r for r in results if r.equivalent is None]
    return sum(r.caught_by is not None for r in counted), len(counted), len(results) - len(counted)


def named(exercises) -> tuple[list, int]:
    """Rows (exercise, mutant, caught by or 'NOT CAUGHT') and the number of failing solutions."""
    sol_bad, rows = 0, []
    with tempfile.TemporaryDirectory(prefix="pagedsim-mutants-") as tmp:
        for ex in exercises:
            sol = run_checks(ex, ex.path("solution"))
            if not sol.ok:
                sol_bad += 1
                print_report(sol, verbose=True, hint=False)
                print(f"  ^ the reference solution of {ex.id} does not pass its own checks")
            source, stem = ex.path("solution").read_text(), Path(tmp) / ex.id.replace(".", "_")
            for m in wrong_for(ex.id):  # ours: trusted
                path = Path(f"{stem}_{m.name}.py")
                path.write_text(m.apply(source))
                res = run_checks(ex, path, stop_at_first=True, seconds=20, isolate=False)
                caught = res.failures[0].check if res.failures else None
                missed = "NOT CAUGHT" + (f" ({res.error})" if res.error else "")
                rows.append((ex.id, m.name, caught or missed))
            for m in (m for m in RIGHT if m.exercise == ex.id):  # correct, written differently
                path = Path(f"{stem}_right_{m.name}.py")
                path.write_text(m.apply(source))
                res = run_checks(ex, path, isolate=False)
                if not res.ok:
                    sol_bad += 1
                    print_report(res, verbose=True, hint=False)
                    print(f"  ^ {ex.id}'s correct variant {m.name} is rejected ({m.mistake})")
    return rows, sol_bad


def report(exercises, *, generic: bool = False, sample: int | None = None) -> int:
    rows, sol_bad = named(exercises)
    if rows:
        w0, w1 = max(len(r[1]) for r in rows), max(len(r[2]) for r in rows)
        print(f"{'exercise':<8} | {'mutant':<{w0}} | caught by")
        print(f"{'-' * 8}-+-{'-' * w0}-+-{'-' * w1}")
        for r in rows:
            print(f"{r[0]:<8} | {r[1]:<{w0}} | {r[2]}")
    caught = sum(1 for r in rows if not r[2].startswith("NOT CAUGHT"))
    solutions = f"{len(exercises) - sol_bad}/{len(exercises)} solutions pass"
    print(f"\n{caught}/{len(rows)} mutants caught; {solutions}")
    bad = bool(sol_bad or caught < len(rows))
    if generic:
        what = f"a seeded sample of {sample} per exercise" if sample else "all of them"
        how = "python -m course.mutation --survivors lists them"
        print(f"\ngeneric mutants of each solution ({what}; {how}):")
        for ex in exercises:
            got, counted, eq = score(measure(ex, sample=sample))
            share = got / counted if counted else 1.0
            bad |= share < GENERIC_TARGET
            eqs = f", {eq} equivalent" if eq else ""
            print(f"  {ex.id:<5} {got:>4}/{counted:<4} caught ({share:.1%}){eqs}", flush=True)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.split("\n\n")[0]
    p = argparse.ArgumentParser(prog="python -m course.mutation", description=doc)
    p.add_argument("exercises", nargs="*", help="exercise ids (default: all)")
    p.add_argument("--sample", type=int, help="a seeded sample of N mutants per exercise")
    p.add_argument("--list", action="store_true", help="list the mutants without running them")
    p.add_argument("--survivors", action="store_true", help="print every mutant no check caught")
    args = p.parse_args(argv)
    exercises = [curriculum.find(i) for i in args.exercises] or curriculum.load()
    total_caught = total = 0
    for ex in exercises:
        if args.list:
            for m, _ in generate(ex.id, ex.path("solution").read_text(encoding="utf-8")):
                print(f"{ex.id} #{m.index} line {m.line}: {m.key}")
            continue
        results = measure(ex, sample=args.sample)
        caught, counted, eq = score(results)
        total_caught, total = total_caught + caught, total + counted
        eqs = f", {eq} listed as equivalent" if eq else ""
        share = f"{caught / max(counted, 1):.1%}"
        print(
            f"{ex.id:<5} {caught:>4}/{counted:<4} generic mutants caught ({share}){eqs}", flush=True
        )
        if args.survivors:
            for m in (r.mutant for r in results if r.caught_by is None and r.equivalent is None):
                print(f"      survived #{m.index} line {m.line}: {m.key}", flush=True)
    if not args.list:
        print(f"all   {total_caught:>4}/{total:<4} ({total_caught / max(total, 1):.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
