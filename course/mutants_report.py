"""`pagedsim check --mutants [--generic [--sample N]]`: the proof that the checks can fail.

Named mutants (ch03_kv_block/mutants.toml): every reference solution and every correct
variant (mutation.RIGHT) must pass its checks, and every named mistake must be caught by some
check; the table says which one.
With --generic, course/mutation.py's blind measure is printed next to it: the share of
generic mutants (operator, comparison, constant, statement deletion) of each solution
that the checks catch, which must be at least GENERIC_TARGET.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

GENERIC_TARGET = 0.95


def named(exercises) -> tuple[list, int]:
    """Rows (exercise, mutant, caught by or 'NOT CAUGHT') and the number of failing solutions."""
    from . import mutation
    from .runner import print_report, run_checks

    sol_bad, rows = 0, []
    with tempfile.TemporaryDirectory(prefix="pagedsim-mutants-") as tmp:
        for ex in exercises:
            sol = run_checks(ex, ex.path("solution"))
            if not sol.ok:
                sol_bad += 1
                print_report(sol, verbose=True, hint=False)
                print(f"  ^ the reference solution of {ex.id} does not pass its own checks")
            for m in mutation.wrong_for(ex.id):
                path = Path(tmp) / f"{ex.id.replace('.', '_')}_{m.name}.py"
                path.write_text(m.apply(ex.path("solution").read_text()))
                # our own mutants
                res = run_checks(ex, path, stop_at_first=True, seconds=20, isolate=False)
                caught = res.failures[0].check if res.failures else None
                rows.append(
                    (
                        ex.id,
                        m.name,
                        caught or "NOT CAUGHT" + (f" ({res.error})" if res.error else ""),
                    )
                )
            for m in mutation.right_for(ex.id):  # correct, written differently
                path = Path(tmp) / f"{ex.id.replace('.', '_')}_right_{m.name}.py"
                path.write_text(m.apply(ex.path("solution").read_text()))
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
    print(
        f"\n{caught}/{len(rows)} mutants caught; "
        f"{len(exercises) - sol_bad}/{len(exercises)} solutions pass"
    )
    bad = bool(sol_bad or caught < len(rows))
    if generic:
        from .mutation import measure, score

        what = f"a seeded sample of {sample} per exercise" if sample else "all of them"
        print(
            f"\ngeneric mutants of each solution ({what}; "
            "python -m course.mutation --survivors lists them):"
        )
        for ex in exercises:
            got, counted, eq = score(measure(ex, sample=sample))
            share = got / counted if counted else 1.0
            bad |= share < GENERIC_TARGET
            print(
                f"  {ex.id:<5} {got:>4}/{counted:<4} caught ({share:.1%})"
                + (f", {eq} equivalent" if eq else ""),
                flush=True,
            )
    return 1 if bad else 0
