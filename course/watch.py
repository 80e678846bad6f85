"""`pagedsim watch [ID]`: check on every save, and move on to the next exercise on a pass
(rustlings' `watch`).

It checks the exercise (default: the first not passed), then polls the file's content hash every
--interval seconds and checks again when it changes. On a pass it records it (course/progress.py)
and moves on. --iterations N stops after N checks; Ctrl-C stops it."""

from __future__ import annotations

import time

from pagedsim.io.args import ArgParser, float_in, int_in

from . import curriculum, i18n, progress, workspace
from .runner import print_report, run_checks


def _next_left(ex, exercises) -> curriculum.Exercise | None:
    """The first exercise after `ex` not passed, wrapping around to the start."""
    i = exercises.index(ex)
    return progress.current(exercises[i + 1 :] + exercises[: i + 1])


def watch(ex, exercises, *, interval: float, iterations: int | None, timeout=None) -> int:
    """Check `ex` now and on every change, moving on after each pass; returns the exit status."""
    runs = 0
    while ex is not None:
        mine = workspace.find(ex)
        if mine is None:
            print(f"no workspace file for {ex.id}: run `pagedsim workspace` first")
            return 1
        print(f"\n== checking {ex.id} ({mine}) ==")
        seen = progress.digest(mine)  # before the check: a save while it runs is checked next
        outcome = run_checks(ex, mine, seconds=timeout)
        progress.record(outcome)
        print_report(outcome, verbose=False, hint=True)
        runs += 1
        if outcome.ok:
            done, ex = ex, _next_left(ex, exercises)
            if ex is None:
                print(f"\n{done.id} passes, and so does every other exercise: well done")
                return 0
            print(f"\n{done.id} passes; next: {ex.id} {ex.title_in(i18n.lang())}")
            if ex.section != done.section:  # step 1 of every exercise: run its section's lesson
                lesson = f"pagedsim lesson {ex.section}"
                print(
                    i18n.say(
                        f"  (new section: read `{lesson}` first)",
                        f"  （新的一节：先读 `{lesson}`）",
                    )
                )
            if iterations is not None and runs >= iterations:
                return 0
            continue
        if iterations is not None and runs >= iterations:
            return 1
        print(f"\nwatching {mine.name}: save it to check again (Ctrl-C stops)")
        while progress.digest(mine) == seen:
            time.sleep(interval)
    return 0


def main(argv: list[str]) -> int:
    what = "check an exercise on every save; move on to the next on a pass"
    p = ArgParser(prog="pagedsim watch", description=what)
    p.add_argument("exercise", nargs="?", help="where to start (default: the first not passed)")
    every = "seconds between looks at the file (default 1)"
    seconds = float_in(0, 86_400, open_low=True)
    p.add_argument("--interval", type=seconds, default=1.0, metavar="S", help=every)
    p.add_argument("--iterations", type=int_in(1, 10**9), metavar="N", help="stop after N checks")
    p.add_argument("--timeout", type=seconds, metavar="S", help="seconds allowed per check")
    args = p.parse_args(argv)
    exercises = curriculum.load()
    ex = progress.named_or_current(p, args.exercise, exercises)
    if ex is None:
        print(f"all {len(exercises)} exercises pass: well done")
        return 0
    how = dict(interval=args.interval, iterations=args.iterations, timeout=args.timeout)
    try:
        return watch(ex, exercises, **how)
    except KeyboardInterrupt:
        print("\nstopped")
        return 130
