"""`pagedsim lesson` and `pagedsim check`: the course's two commands.

    pagedsim lesson                 list the lessons
    pagedsim lesson 3.4 [--out DIR] [--no-demo]
    pagedsim check                  list the exercises
    pagedsim check 3.4a             your stub against its checks
    pagedsim check 3.4a --impl F    any implementation file against them
    pagedsim check --all [--solutions]
    pagedsim check --curriculum     refuse missing paths, orphan files, empty hints
    pagedsim check --mutants        every solution passes and every known bug is caught

Exit status 0 means every requested check passed.
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
import textwrap
from pathlib import Path

from . import curriculum

LESSONS = {s: f"course.ch03_kv_block.lessons.l{s.replace('.', '_')}" for s in
           ("3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8")}


def lesson_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pagedsim lesson", description="print and run a chapter-3 lesson")
    p.add_argument("section", nargs="?", help="3.1 ... 3.8")
    p.add_argument("--out", type=Path, help="where figures go (default: a new temporary folder)")
    p.add_argument("--no-demo", action="store_true", help="print the text only")
    args = p.parse_args(argv)
    if args.section is None:
        for s, mod in LESSONS.items():
            print(f"  {s}  {importlib.import_module(mod).TITLE}")
        print("\nrun one with `pagedsim lesson 3.1`")
        return 0
    if args.section not in LESSONS:
        print(f"pagedsim lesson: no lesson {args.section!r}; choose one of {', '.join(LESSONS)}")
        return 2
    lesson = importlib.import_module(LESSONS[args.section])
    print(f"== {args.section} {lesson.TITLE} ==\n")
    print(textwrap.dedent(lesson.TEXT).strip(), "\n")
    if not args.no_demo:
        out = args.out or Path(tempfile.mkdtemp(prefix=f"pagedsim-lesson-{args.section}-"))
        out.mkdir(parents=True, exist_ok=True)
        print("-- demo --")
        lesson.demo(out)
        print()
    exercises = [e for e in curriculum.load() if e.section == args.section]
    for ex in exercises:
        print(f"exercise {ex.id}: {ex.title}\n  edit   {ex.stub}\n  check  pagedsim check {ex.id}")
    return 0


def _report(outcome, *, verbose_hint: bool) -> None:
    ex = outcome.exercise
    if outcome.error:
        print(f"ERROR {ex.id}: {outcome.error}")
    elif outcome.ok:
        print(f"PASS {ex.id}  {ex.title} ({outcome.passed} checks)")
    for reason in outcome.skipped:
        print(f"SKIP {ex.id}: {reason}")
    shown = set()
    for f in outcome.failures:
        if f.message not in shown and len(shown) < 4:
            print(f"FAIL {ex.id}: {f.message}")
            shown.add(f.message)
    if len(outcome.failures) > len(shown):
        print(f"     ... {len(outcome.failures) - len(shown)} more failing check(s)")
    if outcome.failures and verbose_hint:
        print(textwrap.fill(f"hint: {ex.hint}", 100, subsequent_indent="      "))


def _mutants(exercises) -> int:
    from .ch03_kv_block import mutants
    from .runner import run_checks

    sol_bad, rows = 0, []
    with tempfile.TemporaryDirectory(prefix="pagedsim-mutants-") as tmp:
        for ex in exercises:
            sol = run_checks(ex, ex.path("solution"))
            if not sol.ok:
                sol_bad += 1
                _report(sol, verbose_hint=False)
                print(f"  ^ the reference solution of {ex.id} does not pass its own checks")
            for m in mutants.for_exercise(ex.id):
                path = Path(tmp) / f"{ex.id.replace('.', '_')}_{m.name}.py"
                path.write_text(mutants.apply(m, ex.path("solution").read_text()))
                res = run_checks(ex, path, stop_at_first=True)
                caught = res.failures[0].check if res.failures else None
                rows.append((ex.id, m.name, caught or "NOT CAUGHT" + (f" ({res.error})" if res.error else "")))
    w0, w1 = max(len(r[1]) for r in rows), max(len(r[2]) for r in rows)
    print(f"{'exercise':<8} | {'mutant':<{w0}} | caught by")
    print(f"{'-' * 8}-+-{'-' * w0}-+-{'-' * w1}")
    for r in rows:
        print(f"{r[0]:<8} | {r[1]:<{w0}} | {r[2]}")
    caught = sum(1 for r in rows if not r[2].startswith("NOT CAUGHT"))
    print(f"\n{caught}/{len(rows)} mutants caught; "
          f"{len(exercises) - sol_bad}/{len(exercises)} solutions pass")
    return 1 if sol_bad or caught < len(rows) else 0


def check_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pagedsim check", description="run an exercise's checks")
    p.add_argument("exercise", nargs="?", help="an exercise id such as 3.4a")
    p.add_argument("--impl", type=Path, help="check this file instead of the exercise's stub")
    p.add_argument("--all", action="store_true", help="every exercise, in course order")
    p.add_argument("--solutions", action="store_true", help="check the reference solutions")
    p.add_argument("--curriculum", action="store_true", help="validate course/curriculum.toml")
    p.add_argument("--mutants", action="store_true", help="prove the checks catch the known bugs")
    args = p.parse_args(argv)
    exercises = curriculum.load()
    if args.curriculum:
        found = curriculum.problems(exercises)
        for line in found:
            print(f"curriculum: {line}")
        print("curriculum: OK" if not found else f"curriculum: {len(found)} problem(s)")
        return 1 if found else 0
    if args.mutants:
        return _mutants(exercises)
    if args.all:
        chosen = exercises
    elif args.exercise:
        try:
            chosen = [curriculum.find(args.exercise, exercises)]
        except KeyError as e:
            print(f"pagedsim check: {e.args[0]}")
            return 2
    else:
        for ex in exercises:
            print(f"  {ex.id:<5} {ex.title}\n        {ex.stub}")
        print("\ncheck one with `pagedsim check 3.1`")
        return 0
    if args.impl and len(chosen) != 1:
        print("pagedsim check: --impl needs exactly one exercise id")
        return 2
    from .runner import run_checks

    failed = 0
    for ex in chosen:
        impl = args.impl or ex.path("solution" if args.solutions else "stub")
        outcome = run_checks(ex, impl)
        _report(outcome, verbose_hint=not args.solutions and len(chosen) == 1)
        failed += not outcome.ok
    if len(chosen) > 1:
        print(f"\n{len(chosen) - failed}/{len(chosen)} exercises pass")
    return 1 if failed else 0
