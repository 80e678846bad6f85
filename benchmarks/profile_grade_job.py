"""Where one `pagedsim grade` job's time goes, phase by phase.

    python benchmarks/profile_grade_job.py [--exercise 3.1] [--repeat 3] [--json]

A job (course/grade_job.py) starts a cold checker that imports pytest, Hypothesis, NumPy
and pagedsim, collects the checks and starts the submission under bubblewrap. Each phase is
the median of `--repeat` fresh processes: the interpreter's start; the checker's imports,
cumulative; the child's start without and with bubblewrap; pytest's collection with every
plugin and with Hypothesis' alone; the checks in-process on the reference solution, cold
then warm. The rest of `bench_grade.py`'s job time: the copy, the hashing, the kill.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pagedsim.testing import jail

ROOT = Path(__file__).resolve().parents[1]
IMPORTS = ("numpy", "hypothesis", "pytest", "pagedsim", "course.runner", "course.isolation")
TIMED_IMPORTS = (
    "import importlib, json, sys, time\n"
    "t0 = time.perf_counter(); out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    importlib.import_module(name); out[name] = time.perf_counter() - t0\n"
    "print(json.dumps(out))\n"
)
CHILD = "from course.isolation import child_main"


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}


def _wall(argv: list[str], repeat: int, env=None) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, env=env or _env(), check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def imports(repeat: int) -> dict:
    argv, runs = [sys.executable, "-c", TIMED_IMPORTS, *IMPORTS], []
    for _ in range(repeat):
        done = subprocess.run(argv, env=_env(), check=True, capture_output=True, text=True)
        runs.append(json.loads(done.stdout))
    return {name: statistics.median(r[name] for r in runs) for name in IMPORTS}


def child_start(repeat: int) -> dict:
    argv = [sys.executable, "-c", CHILD]
    out = {"plain": _wall(argv, repeat)}
    if jail.bwrap() is None:
        return out
    with tempfile.TemporaryDirectory(prefix="profile-grade-") as tmp:
        env = jail.child_env(home=Path(tmp), pythonpath=str(ROOT))
        boxed = jail.sandbox_argv(argv, code_root=ROOT, scratch=Path(tmp), env=env)
        out["bubblewrap"] = _wall(boxed, repeat, env)
    return out


def collection(exercise_id: str, repeat: int) -> dict:
    from course import curriculum

    check = str(ROOT / curriculum.find(exercise_id).checks[0])
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", check]
    argv += ["-p", "no:cacheprovider"]
    off = {**_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return {
        "autoload": _wall(argv, repeat),
        "hypothesis_only": _wall([*argv, "-p", "_hypothesis_pytestplugin"], repeat, off),
    }


def checks(exercise_id: str) -> dict:
    from course import curriculum, runner

    ex = curriculum.find(exercise_id)
    out = {}
    for name in ("first", "second"):
        start = time.perf_counter()
        outcome = runner.run_checks(ex, ex.path("solution"), isolate=False)
        out[name] = time.perf_counter() - start
        out[f"{name}_status"] = outcome.status
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exercise", default="3.1")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = {
        "interpreter_s": _wall([sys.executable, "-c", "pass"], args.repeat),
        "checker_imports_s": imports(args.repeat),
        "child_start_s": child_start(args.repeat),
        "collection_s": collection(args.exercise, args.repeat),
        "checks_s": checks(args.exercise),
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"interpreter start: {out['interpreter_s']:.2f} s")
    for name, s in out["checker_imports_s"].items():
        print(f"  checker imports up to {name}: {s:.2f} s")
    for name, s in out["child_start_s"].items():
        print(f"submission process start ({name}): {s:.2f} s")
    for name, s in out["collection_s"].items():
        print(f"pytest collection in a fresh process ({name}): {s:.2f} s")
    c = out["checks_s"]
    print(
        f"checks of {args.exercise} in-process: first {c['first']:.2f} s ({c['first_status']}), "
        f"second {c['second']:.2f} s ({c['second_status']})"
    )


if __name__ == "__main__":
    main()
