"""The `pagedsim` command: one sub-command per job, each living in its own module.

Sub-commands are imported only when used, so `pagedsim tour` never loads
matplotlib or numba. Each target is a `main(argv: list[str]) -> int` function.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    # name: (module:function, one-line help)
    "tour": ("pagedsim.tour:main", "walk through chapter 3 on a small pool, step by step"),
    "figures": ("pagedsim.draw.figures:main", "regenerate every figure in figures/"),
    "waste": ("pagedsim.labs.waste:main", "memory-waste breakdown: paged vs max/pow2/oracle"),
    "sweep": ("pagedsim.labs.sweep:main", "block sizes 1..256 on a workload"),
    "policies": ("pagedsim.labs.policies:main", "compare eviction policies on one trace"),
    "swapcost": ("pagedsim.labs.swapcost:main", "swap vs recompute: the cost model"),
    "race": ("pagedsim.interleavings:main", "enumerate interleavings of a concurrent block pop"),
    "generate": ("pagedsim.engine.generate:main", "serve a tiny model from the blocks; compare with a dense engine"),
    "lesson": ("course.cli:lesson_main", "print and run a chapter-3 lesson, e.g. `lesson 3.4`"),
    "check": ("course.cli:check_main", "check an exercise, e.g. `check 3.4a`"),
    "conform": ("pagedsim.testing.conform:main", "check your own block manager against the model"),
    "workspace": ("course.workspace:main", "copy the exercise stubs to your own folder (default ./pagedsim-work)"),
    "grade": ("course.grade:main", "grade a folder of submissions, one process each, with a time limit"),
    "export-course": ("course.export:main", "write a student copy of the course without the solutions"),
    "play": ("pagedsim.play:main", "a playground: type alloc/append/fork/free and watch the blocks"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: pagedsim COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "`pagedsim COMMAND --help` describes each one."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"pagedsim: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name = COMMANDS[name][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    try:
        return int(func(rest) or 0)
    except BrokenPipeError:  # `pagedsim tour | head`: the reader left; that is not an error
        sys.stdout = None
        return 0


if __name__ == "__main__":
    sys.exit(main())
