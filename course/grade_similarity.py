"""`pagedsim grade`'s similarity: each submission against the reference solution (a flag), and
student against student (the most similar pairs per exercise). Neither ever fails a job.

Files are parsed (never run) and normalised: docstrings dropped, every name but builtins renamed
in order of first appearance (`n0`, `n1`, ...). The dumped tree's tokens are fingerprinted by
winnowing (Schleimer, Wilkerson and Aiken, SIGMOD 2003, the method behind MOSS): hash every run
of K tokens, keep the smallest hash in each window of W. Similarity is the Jaccard share of
fingerprints. For student pairs, the stub's fingerprints and those more than COMMON of the class
share are removed first.

`compare` runs in a child (`python -m course.grade_similarity`, JSON on stdin and stdout only)
that limits its own memory and CPU before it reads a byte, under a wall-clock limit here. A child
out of budget costs the report, not a job."""

from __future__ import annotations

import ast
import builtins
import json
import os
import resource
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field

from pagedsim.testing import walk

from . import curriculum

THRESHOLD = 0.95  # share of fingerprints in common with the reference: flagged at or above
PAIR_THRESHOLD = 0.6  # student pairs reported at or above this share
TOP_PAIRS = 5  # pairs reported per exercise
MAX_BYTES = 64 << 10  # a file larger is not compared (the largest solution is ~5 KB)
K, W = 12, 8  # tokens per hashed run; hashes per winnowing window
COMMON = 0.25  # a fingerprint in more than this share of a class's files is ignored for pairs
# the child's CPU budget (wall clock: twice that); a file of MAX_BYTES takes ~2 s on a loaded core
SECONDS, SECONDS_PER_FILE = 30, 4
MEMORY = 1 << 30  # the child's address space
TOO_LARGE = "too large to compare"
FLAG = (
    " the reference solution once names, comments and formatting are normalised: look at it "
    "(a flag, not a fail)"
)


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

    def visit_Attribute(self, node):
        node.attr = self._name(node.attr)
        return self.generic_visit(node)

    def visit_arg(self, node):
        node.arg, node.annotation = self._name(node.arg), None
        return node

    def _body(self, node):
        if ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:] or [ast.Pass()]
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
    """The normalised file as tokens (None when it does not parse or is too large)."""
    if len(source) > MAX_BYTES:
        return None
    try:
        tree = _Normalise().visit(ast.parse(source))
        dump = ast.dump(tree, annotate_fields=False)
    except (SyntaxError, ValueError, RecursionError):
        return None
    return dump.replace("(", " ( ").replace(")", " ) ").replace(",", " ").split()


def fingerprints(toks: list[str]) -> frozenset[int]:
    """Winnowing: the smallest hash of every window of W hashes of K-token runs."""
    if len(toks) < K:
        return frozenset([hash(tuple(toks))]) if toks else frozenset()
    hashes = [hash(tuple(toks[i : i + K])) for i in range(len(toks) - K + 1)]
    if len(hashes) <= W:
        return frozenset([min(hashes)])
    return frozenset(min(hashes[i : i + W]) for i in range(len(hashes) - W + 1))


def _reference(exercise_id: str, field: str) -> bytes | None:
    try:
        return walk.read(curriculum.find(exercise_id).path(field), MAX_BYTES)
    except (KeyError, walk.Stopped):
        return None


@dataclass
class Report:
    flags: dict = field(default_factory=dict)  # (student, exercise id) -> flag line
    pairs: dict = field(default_factory=dict)  # exercise id -> [(student, student, share)]
    problem: str = ""  # why there is no report (the child ran out of its budget), or ''


def compare(files: dict) -> dict:
    """The child's work: {ex: {student: path}} -> {"flags": {ex: {student: line}}, "pairs":
    {ex: [[a, b, share], ...]}}."""
    flags: dict = {}
    pairs: dict = {}
    for ex_id, by_student in files.items():
        prints: dict = {}
        ref, stub = (_prints(_reference(ex_id, f)) for f in ("solution", "stub"))
        for student, path in by_student.items():
            try:
                prints[student] = _prints(walk.read(path, MAX_BYTES))
            except (walk.Stopped, MemoryError):  # over the cap, or its tree over the budget
                flags.setdefault(ex_id, {})[student] = TOO_LARGE
                continue
            mine = prints[student]
            r = len(mine & ref) / len(mine | ref) if mine and ref else 0.0
            if r >= THRESHOLD:
                what = "identical to" if r == 1.0 else f"{r:.0%} like"
                flags.setdefault(ex_id, {})[student] = what + FLAG
        pairs[ex_id] = _pairs({s: p - stub for s, p in prints.items()})
    return {"flags": flags, "pairs": pairs}


def _prints(source: bytes | None) -> frozenset:
    toks = tokens(source) if source is not None else None
    return fingerprints(toks) if toks else frozenset()


def _pairs(prints: dict) -> list:
    """The TOP_PAIRS most similar pairs at or above PAIR_THRESHOLD, less common fingerprints."""
    index: dict = {}
    for s, fp in prints.items():
        for f in fp:
            index.setdefault(f, []).append(s)
    most = max(2, int(COMMON * len(prints)))
    rare = {f for f, owners in index.items() if len(owners) <= most}
    shared: Counter = Counter()
    for f in rare:
        owners = index[f]
        for i, a in enumerate(owners):
            for b in owners[i + 1 :]:
                shared[a, b] += 1
    shares = ((a, b, n / len((prints[a] | prints[b]) & rare)) for (a, b), n in shared.items())
    scored = [[a, b, round(s, 3)] for a, b, s in shares if s >= PAIR_THRESHOLD]
    return sorted(scored, key=lambda p: (-p[2], p[0], p[1]))[:TOP_PAIRS]


def run(files: dict, seconds: float | None = None, memory: int = MEMORY) -> Report:
    """`compare` in a child under its own CPU and memory limits and a wall-clock limit here; a
    failed child gives a Report with `problem`."""
    seconds = seconds or SECONDS + SECONDS_PER_FILE * sum(map(len, files.values()))
    job = json.dumps({"files": {e: {s: str(p) for s, p in f.items()} for e, f in files.items()}})
    env = {**os.environ, "PYTHONPATH": str(curriculum.REPO_ROOT), "PYTHONHASHSEED": "0"}
    env["PAGEDSIM_SIMILARITY_LIMITS"] = json.dumps([max(1, int(seconds)), int(memory)])
    try:
        out = subprocess.run(
            [sys.executable, "-m", "course.grade_similarity"],
            input=job,
            capture_output=True,
            text=True,
            timeout=2 * seconds,
            env=env,
            cwd=curriculum.REPO_ROOT,
        )
    except subprocess.TimeoutExpired:
        return Report(problem=f"similarity not computed: over its {2 * seconds:g} s budget")
    try:
        data = json.loads(out.stdout) if out.returncode == 0 else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return Report(
            problem=f"similarity not computed: its process ended with code {out.returncode} "
            f"(over its {seconds:g} s CPU or {memory >> 20} MiB budget?)"
        )
    flags = {(s, e): line for e, by in data["flags"].items() for s, line in by.items()}
    pairs = {e: [tuple(p) for p in ps] for e, ps in data["pairs"].items() if ps}
    return Report(flags, pairs)


def main() -> int:
    """The child: limit itself, then read the job from stdin and print the answer."""
    seconds, memory = json.loads(os.environ["PAGEDSIM_SIMILARITY_LIMITS"])
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    job = json.loads(sys.stdin.read())
    print(json.dumps(compare(job["files"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
