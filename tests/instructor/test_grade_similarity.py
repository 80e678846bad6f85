"""Similarity under a budget (issue 39, deliverable 5) and student against student (issue 42).

Before, the reference flag ran difflib's quadratic matcher in the grader, after all jobs,
outside every limit: one 724 KB padded file cost 607 s. Now fingerprints are winnowed
(linear), in a child with CPU and memory limits, and a file over the cap is "too large to
compare" without being parsed.
"""

import json
import subprocess
import sys
import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from course import curriculum, grade, grade_report
from course import grade_similarity as similarity

NAME = "ex3_1_first_fit.py"
SOLUTION = curriculum.find("3.1").path("solution")


def padded(size: int) -> str:
    """The reference solution padded with distinct statements up to `size` bytes: what made
    the quadratic matcher take ten minutes."""
    text = SOLUTION.read_text() if SOLUTION.is_file() else ""
    lines, n, total = [text], 0, len(text)
    while total < size:
        lines.append(f"pad_{n} = {n} * {n % 7} + len({n % 13!r} * 3)\n")
        total += len(lines[-1])
        n += 1
    return "".join(lines)


GRADE_PADDED = textwrap.dedent("""
    import json, sys
    from course import grade
    results = grade.grade(sys.argv[1], ["3.1"], timeout=300, mode=grade.Mode(False, False),
        command=lambda e, p, x=(): [sys.executable, "-c",
            "import os; os.write(int(os.environ['PAGEDSIM_VERDICT_FD']), "
            "b'{\\"status\\": \\"pass\\", \\"passed\\": 1, \\"total\\": 1}\\\\n')"])
    print(json.dumps({r.student: [r.status, r.similar] for r in results}))
""")


def test_a_724_kb_padded_file_is_too_large_to_compare_and_the_run_ends_soon(tmp_path):
    root = tmp_path / "class"
    for student, text in {"pad": padded(724_000), "ann": "x = 1\n"}.items():
        (root / student).mkdir(parents=True)
        (root / student / NAME).write_text(text)
    # generous: the old matcher took 607 s on this file; this run takes a few seconds
    out = subprocess.run(
        [sys.executable, "-c", GRADE_PADDED, str(root)],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    got = json.loads(out.stdout.splitlines()[-1])
    assert got == {"pad": ["pass", "too large to compare"], "ann": ["pass", ""]}, got


def test_a_child_over_its_cpu_budget_costs_the_report_never_a_job(tmp_path):
    files = {}
    for i in range(12):  # 12 files at the size cap: far more than 1 s of CPU
        path = tmp_path / f"f{i}.py"
        path.write_text(padded(similarity.MAX_BYTES - 100) + f"\nlast = {i}\n")
        files[f"s{i}"] = path
    report = similarity.run({"3.1": files}, seconds=1, memory=1 << 30)
    assert report.flags == {} and report.pairs == {}
    assert report.problem.startswith("similarity not computed"), report.problem


def own_answer(variant: int) -> str:
    """A first-fit answer of a student's own, one of three shapes."""
    bodies = [
        "for i, (s, n) in enumerate(self.h):\n            if n >= size:\n"
        "                self.h[i] = (s + size, n - size)\n                return s\n"
        "        raise MemoryError(size)\n",
        "i = 0\n        while i < len(self.h):\n            s, n = self.h[i]\n"
        "            if n > size - 1:\n                del self.h[i]\n"
        "                self.h.insert(i, (s + size, n - size))\n                return s\n"
        "            i += 1\n        return -1\n",
        "best = [p for p in self.h if p[1] >= size]\n        if not best:\n"
        "            raise ValueError('full')\n        s, n = best[0]\n"
        "        k = self.h.index(best[0])\n        self.h[k] = (s + size, n - size)\n"
        "        return s\n",
    ]
    head = "class Alloc:\n    def __init__(self, total):\n        self.h = [(0, total)]\n\n"
    return head + f"    def allocate(self, size):\n        {bodies[variant]}"


def test_the_most_similar_pair_is_the_two_who_share_an_answer_up_to_names(tmp_path):
    copied = own_answer(1)
    disguised = copied.replace("self.h", "self.holes").replace("Alloc", "Mine")
    texts = {"ann": copied, "ben": "# mine\n" + disguised, "cat": own_answer(0)}
    texts["dan"] = own_answer(2)
    files = {}
    for s, t in texts.items():
        files[s] = tmp_path / f"{s}.py"
        files[s].write_text(t)
    report = similarity.run({"3.1": files})
    assert report.problem == ""
    (top, *rest) = report.pairs["3.1"]
    assert top[:2] == ("ann", "ben") and top[2] >= 0.9, report.pairs
    assert all(share < top[2] for _, _, share in rest)
    table = grade_report.table([], report.pairs)
    assert "3.1  ann  ben" in table
    rows = grade_report.pairs_csv(report.pairs).splitlines()
    assert rows[0] == "exercise,student,other,share" and rows[1].startswith("3.1,ann,ben,")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "(", ")", "x", "1"]), max_size=200))
def test_a_file_is_identical_to_itself_and_winnowing_keeps_a_fingerprint_per_window(toks):
    fp = similarity.fingerprints(toks)
    assert bool(fp) == bool(toks)
    span = similarity.K + similarity.W - 1
    if len(toks) >= span:  # every run of K + W - 1 tokens holds a kept fingerprint
        for start in range(0, len(toks) - span + 1, 17):
            window = toks[start : start + span]
            runs = {hash(tuple(window[i : i + similarity.K])) for i in range(similarity.W)}
            assert runs & fp


def test_the_stub_is_never_flagged_against_the_reference_through_grade(tmp_path, fake_checker):
    root = tmp_path / "class"
    (root / "ann").mkdir(parents=True)
    (root / "ann" / NAME).write_bytes(curriculum.find("3.1").path("stub").read_bytes())
    (r,) = grade.grade(root, ["3.1"], command=fake_checker, mode=grade.Mode(False, False))
    assert r.status == "fail" and r.similar == ""
