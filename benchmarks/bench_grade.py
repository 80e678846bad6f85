"""Grading benchmark: `pagedsim grade`'s time per job, and what a second worker buys.

    python benchmarks/bench_grade.py [--students 4] [--exercises 3.1 3.2] [--workers 1 2]
        [--checker lean autoload warm] [--json]

A generated class (half the files the reference solution, half the stub), graded with the
real checks in the default isolation, with each number of workers in turn: wall time, jobs
per minute, mean and median job time, the last run's speed-up over the first, core-hours
per class size from the last 1-worker run. `--checker` compares lean, autoload and warm
side by side. The defaults grade 8 jobs twice, about 2 minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

from course import curriculum, grade, grade_job

CLASSES = ((30, 14), (100, 14), (200, 14))  # (students, exercises) in the sizing lines


def make_class(root: Path, students: int, exercise_ids) -> None:
    for n in range(students):
        folder = root / f"student{n:03d}"
        folder.mkdir(parents=True)
        for i in exercise_ids:
            ex = curriculum.find(i)
            source = ex.path("solution") if n % 2 == 0 else ex.path("stub")
            text = source.read_text() + f"\n# student {n}\n"
            (folder / Path(ex.stub).name).write_text(text)


def _autoload_env(*args):
    """The checker's environment as before issue 42's cut: every pytest plugin autoloaded."""
    env = LEAN_ENV(*args)
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    return env


LEAN_ENV = grade_job._env


def measure(root: Path, exercise_ids, workers: int, checker: str = "lean") -> dict:
    grade_job._env = _autoload_env if checker == "autoload" else LEAN_ENV
    mode = dataclasses.replace(grade.decide_mode(None), warm=checker == "warm")
    start = time.perf_counter()
    try:
        results = grade.grade(root, exercise_ids, workers=workers, mode=mode)
    finally:
        grade_job._env = LEAN_ENV
    wall = time.perf_counter() - start
    seconds = [r.seconds for r in results]
    statuses = sorted({r.status for r in results})
    return {
        "workers": workers,
        "checker": checker,
        "jobs": len(results),
        "wall_s": round(wall, 1),
        "jobs_per_min": round(60 * len(results) / wall, 2),
        "job_mean_s": round(statistics.mean(seconds), 2),
        "job_median_s": round(statistics.median(seconds), 2),
        "statuses": statuses,
        "mode": results[0].mode if results else "",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--students", type=int, default=4)
    ap.add_argument("--exercises", nargs="+", default=["3.1", "3.2"])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="1 must be first")
    ap.add_argument(
        "--checker",
        nargs="+",
        choices=("lean", "autoload", "warm"),
        default=["lean"],
        help="lean: a cold checker per job; autoload: every pytest plugin in it, as before; "
        "warm: forked from its worker's warm process (side by side, in the order given)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-grade-") as tmp:
        make_class(Path(tmp), args.students, args.exercises)
        runs = [
            measure(Path(tmp), args.exercises, w, c) for c in args.checker for w in args.workers
        ]
    first, last = runs[0], runs[-1]
    one = [r for r in runs if r["workers"] == 1][-1]  # the last 1-worker run sizes the class
    per_job = one["wall_s"] / one["jobs"]  # one core's time per job, all overheads included
    out = {
        "runs": runs,
        "speedup_last_over_first": round(first["wall_s"] / last["wall_s"], 2),
        "core_s_per_job": round(per_job, 2),
        "sizing_core_hours": {f"{s}x{e}": round(s * e * per_job / 3600, 2) for s, e in CLASSES},
    }
    if args.json:
        print(json.dumps(out))
        return
    for r in runs:
        print(
            f"{r['checker']} checker, workers {r['workers']}: {r['jobs']} jobs in "
            f"{r['wall_s']} s = "
            f"{r['jobs_per_min']} jobs/min; job mean {r['job_mean_s']} s, median "
            f"{r['job_median_s']} s ({r['mode']}; {', '.join(r['statuses'])})"
        )
    name = [f"{r['checker']} checker, {r['workers']} worker(s)" for r in (last, first)]
    print(f"{name[0]} / {name[1]}: {out['speedup_last_over_first']}x")
    print(f"one core ({one['checker']} checker): {per_job:.2f} s per job")
    for (s, e), hours in zip(CLASSES, out["sizing_core_hours"].values(), strict=True):
        print(f"  {s} students x {e} exercises: {hours} core-hours")


if __name__ == "__main__":
    main()
